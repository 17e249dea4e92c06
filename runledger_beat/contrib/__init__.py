"""Integrations with other frameworks, each an optional extra (``django``: ``contrib/django``).

They build on the public entry points (``api``, ``timing``, ``db.connect``) and may import anything in the
package; nothing in the package imports them.
"""
