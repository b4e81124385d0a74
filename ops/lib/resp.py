"""The smallest Redis (RESP) client, shared by the ops scripts' Python helpers."""

import socket


class RedisError(Exception):
    pass


class Redis:
    """The smallest RESP client: pipelined commands, replies in order."""

    def __init__(self, port, timeout=10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.reader = self.sock.makefile("rb")

    def close(self):
        try:
            self.reader.close()
            self.sock.close()
        except OSError:
            pass

    @staticmethod
    def encode(command):
        parts = [b"*%d\r\n" % len(command)]
        for arg in command:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        return b"".join(parts)

    def pipeline(self, commands, chunk=1000):
        replies = []
        for start in range(0, len(commands), chunk):
            batch = commands[start:start + chunk]
            self.sock.sendall(b"".join(self.encode(c) for c in batch))
            replies.extend(self.read() for _ in batch)
        return replies

    def read(self):
        line = self.reader.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("Redis closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RedisError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            data = self.reader.read(size + 2)
            return data[:-2].decode("utf-8", "replace")
        if kind == b"*":
            size = int(rest)
            if size < 0:
                return None
            return [self.read() for _ in range(size)]
        raise ConnectionError("unexpected RESP reply %r" % line[:40])
