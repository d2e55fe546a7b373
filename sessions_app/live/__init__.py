"""The live feed: websockets that follow a session as its log grows.

`listener` hears the store's NOTIFY and reads the new events once per process, `consumers`
hand them to each viewer's socket (`routing` names the path), `access` says who may watch
and closes sockets whose account changed, `admission` paces handshakes, and `db` runs their
database reads on threads of their own. The messages they send are in `live_protocol`.
"""
