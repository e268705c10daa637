"""The notifications feature's one ``register(catalogue)``: its categories and job types
(:func:`.policy.register`), the inbox channel, and the start hooks that write the catalogue's
channels (``notification_channels``), publish the shipped templates and start the render processes."""
from __future__ import annotations

from .. import channels
from ..catalogue import Catalogue
from ..persian import marked as _l
from . import digest, policy, render_sandbox, templates


def register(cat: Catalogue) -> None:
    """Register the notification tier in ``cat`` (policies come with the features whose events they notify)."""
    policy.register(cat)
    # The digest's shipped text (opsboard.notifications.digest): fa and en, email, SMS and push.
    digest.ship_templates(cat)
    # The inbox: the fan-out writes its row (the inbox channel's delivery) itself, so it has no
    # hand-over and needs no address; quiet hours never defer it.
    channels.define_channel(cat, "inbox", label=_l("Inbox"), hand_over=None, reach=None, subject=True,
                            states=("delivered", "suppressed"), position=0, registered_by="notifications", sensitive="full",
                            sandbox="none: the inbox API and its stream")
    # Channels first: a shipped template's channel must have its row (notification_templates' key).
    cat.start_hooks["notification_channels"] = channels.sync_at_start
    cat.start_hooks["shipped_templates"] = templates.seed_at_start
    # The worker renders authors' templates in render processes (render_sandbox): started now, not at the
    # first delivery.
    cat.start_hooks["render_processes"] = render_sandbox.warm_at_start
