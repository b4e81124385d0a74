import Foundation

/// A TLS-terminating PostgreSQL proxy (as PgBouncer or a cloud provider's proxy can be) that chooses its
/// TLS records: each of the server's answers is sent whole, its last 16 KB (the largest record TLS allows)
/// in one record, the rest before it. A client whose input buffer has less room than that last record
/// reads part of it, and the rest waits inside OpenSSL rather than on the socket. Python's `ssl`, with a
/// self-signed certificate made by `openssl`; plain TCP to the server behind it.
public final class TLSRecordProxy: AsyncShutdown {
    private let process: ManagedProcess
    public let port: Int

    /// Starts a proxy in front of the PostgreSQL on 127.0.0.1:`upstreamPort`.
    public init(upstreamPort: Int) async throws {
        let certificate = try await SelfSignedCertificate(purpose: "tls-proxy")
        (self.process, self.port) = try await PythonProxy.start(
            Self.script, in: certificate.directory, arguments: [String(upstreamPort), certificate.certificatePath, certificate.keyPath]
        )
    }

    public func shutdown() async { await self.process.stop() }

    private static let script = #"""
        import os, select, socket, ssl, sys, threading

        upstream_port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        RECORD = 16384

        def exactly(sock, n):
            data = b""
            while len(data) < n:
                more = sock.recv(n - len(data))
                if not more:
                    raise EOFError
                data += more
            return data

        def serve(client):
            try:
                request = exactly(client, 8)
                if request[4:8] == (80877104).to_bytes(4, "big"):  # GSS encryption: not here
                    client.sendall(b"N")
                    request = exactly(client, 8)
                if request[4:8] != (80877103).to_bytes(4, "big"):  # TLS only
                    return
                client.sendall(b"S")
                tls = context.wrap_socket(client, server_side=True)
                upstream = socket.create_connection(("127.0.0.1", upstream_port))
                while True:
                    ready = [tls] if tls.pending() else select.select([tls, upstream], [], [])[0]
                    if tls in ready:
                        data = tls.recv(65536)
                        if not data:
                            return
                        upstream.sendall(data)
                    if upstream in ready:
                        data = upstream.recv(65536)
                        if not data:
                            return
                        # The whole answer: until the server is quiet for 50 ms.
                        while select.select([upstream], [], [], 0.05)[0]:
                            more = upstream.recv(65536)
                            if not more:
                                break
                            data += more
                        # Its last 16 KB in one record, what comes before in records of their own.
                        head, tail = data[:-RECORD], data[-RECORD:]
                        for start in range(0, len(head), RECORD):
                            tls.sendall(head[start:start + RECORD])
                        tls.sendall(tail)
            except (EOFError, OSError, ssl.SSLError):
                pass
            finally:
                client.close()

        """#
}
