"""The dashboard of ``rankmap serve``: a read-only HTTP API over the store and one static page.

:func:`rankmap.web.app.create_app` builds the app; :mod:`.queries` holds the aggregates the page
needs beyond the store's own; :mod:`.topoview` lays the topology out and routes a job's traffic
over it.
"""
