"""Notifications: the in-app inbox is the source of truth; channels follow it.

* :mod:`.policy` -- per event type: category, sensitivity, channels,
  recipients; the ordered checks that allow, defer or suppress a channel.
* :mod:`.fanout` -- event -> inbox rows + deliveries + channel jobs (batched).
* :mod:`.inbox` -- the end user's inbox: cursor, unread count, seen/read/archived.
* :mod:`.preferences` -- user x category x channel (tenant defaults), quiet hours.
* :mod:`.devices` -- Web Push subscriptions of a user.
* :mod:`.templates` -- versioned templates: draft, publish, roll back.
* :mod:`.render` -- pure rendering: sandboxed Jinja2, locale chain -> ``fa``.
"""
