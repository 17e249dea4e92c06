"""The broker side: fires become stock Celery task messages and go to the broker.

``dispatcher.py`` picks the publisher for the app's broker and drives it; ``amqp.py`` (RabbitMQ: messages
encoded ahead, written in bulk, confirmed per window), ``redis.py`` (Redis: LPUSH commands built ahead,
pipelined) and ``celery.py`` (Celery's own producer, message by message) publish; ``link.py`` holds the
broker connection they share; ``message.py`` builds a fire's message with Celery itself and ``templates.py``
rebuilds messages of a kind from cached, verified pieces; ``fires.py`` is what moves through.
Imports from this package: ``payload``, ``timing``. ``beat`` and ``worker`` import it; it imports neither.
"""
