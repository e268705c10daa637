-- The agents' ticket queue at 1,000,000 tickets (issue 12): indexes for the filters that had none.
-- Each partial index's predicate is written exactly as opsboard/sql/tickets.sql ticket_list writes
-- it, so the planner can prove the query implies it; ticket_sla_state (0012) stays the one
-- definition of a badge, these only find the candidate rows in id order.

-- SLA "breached", the part the breach job marked: rare among all tickets, newest first.
CREATE INDEX tickets_sla_breached_idx ON tickets (id DESC)
    WHERE first_response_breached_at IS NOT NULL OR resolution_breached_at IS NOT NULL;

-- The tickets whose SLA clock runs (open, not paused, not yet marked breached): "on track" in id
-- order, and by their current due time (first response until answered, then resolution) for "at
-- risk" (due in the next quarter of a target) and the overdue ones the breach job has not marked yet.
CREATE INDEX tickets_sla_live_idx ON tickets (id DESC)
    WHERE first_response_breached_at IS NULL AND resolution_breached_at IS NULL AND paused_at IS NULL
      AND status IN ('new', 'triaged', 'in_progress', 'waiting_on_customer');
CREATE INDEX tickets_sla_live_due_idx
    ON tickets ((CASE WHEN first_responded_at IS NULL THEN first_response_due_at ELSE resolution_due_at END))
    WHERE first_response_breached_at IS NULL AND resolution_breached_at IS NULL AND paused_at IS NULL
      AND status IN ('new', 'triaged', 'in_progress', 'waiting_on_customer');

-- SLA "paused": waiting on the customer, clock stopped.
CREATE INDEX tickets_sla_paused_idx ON tickets (id DESC)
    WHERE first_response_breached_at IS NULL AND resolution_breached_at IS NULL AND paused_at IS NOT NULL
      AND status IN ('new', 'triaged', 'in_progress', 'waiting_on_customer');

-- The category filter (a rare category must not scan the whole queue) and search by ticket number
-- across tenants (the unique (tenant_id, number) only serves one tenant).
CREATE INDEX tickets_category_id_idx ON tickets (category_id, id DESC) WHERE category_id IS NOT NULL;
CREATE INDEX tickets_number_idx ON tickets (number);
