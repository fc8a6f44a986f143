"""The control plane's HTTP server: gunicorn runs uvicorn workers whose protocol gives every
request a total deadline for its headers and body and caps connections per address, and whose
bridge buffers each whole request before the Django (WSGI) app runs it in a bounded thread pool.
"""
