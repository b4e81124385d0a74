#ifndef TOLLGATE_CLIBPQ_SHIM_H
#define TOLLGATE_CLIBPQ_SHIM_H
#include <libpq-fe.h>
#include <openssl/ssl.h>

/// Bytes of a TLS record that OpenSSL has decrypted for this connection and libpq has not taken yet (0
/// without TLS). They are no longer on the socket, so polling it would not see them: libpq's own waits
/// check this first (`pgtls_read_pending`), and a caller that polls the socket itself must too.
static inline int tollgate_pq_tls_pending(PGconn *conn) {
    SSL *ssl = (SSL *)PQsslStruct(conn, "OpenSSL");
    return ssl != NULL ? SSL_pending(ssl) : 0;
}
#endif
