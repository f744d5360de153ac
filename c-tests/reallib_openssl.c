/*
 * reallib_openssl.c -- the distribution's unmodified OpenSSL (libcrypto, libssl) driven
 * from goroutines as a thread-per-connection program drives it from threads, beside the
 * same code on plain pthreads. One case per run: argv[1] is the case, argv[2] the mode,
 * "go" (goroutines; the program links libgmp.so, so libssl's read, write, poll... are its
 * hooks) or "thread" (one pthread per worker; tests/c_reallib.rs runs it with
 * GMP_INTERPOSE=0 and compares the "outcome:" lines of both modes).
 *
 *   rsa     16 workers sign 24 messages each with one shared RSA-2048 key (PKCS#1 v1.5,
 *           SHA-256) and verify every signature. OpenSSL keeps a blinding factor per key
 *           for the first thread that signs and uses it unlocked on that thread: two
 *           goroutines interleaved on it inside one signature (one stopped between
 *           blinding and unblinding) produce a signature that does not verify. PKCS#1
 *           v1.5 is deterministic, so every signature must also equal the one the main
 *           thread makes of the same message afterwards (after: the blinding must belong
 *           to a worker's thread).
 *   ecdsa   the same with one shared P-256 key, 16 workers x 100 signatures (randomized:
 *           only the verified count is compared).
 *   tls     a TLS server with an RSA-2048 certificate signed by a P-256 CA (a handler per
 *           accepted connection; the handlers are the first to use the server's key) and
 *           16 clients doing 12 full handshakes each over TCP on 127.0.0.1 (no session
 *           resumption: every handshake makes the server sign); each client verifies the
 *           certificate against the CA, sends a line, and must read it back.
 *   tls_ecdsa the same with a P-256 server certificate (ECDSA handshakes).
 *
 * A watchdog ends a hung run with a message (and, in goroutines, the goroutine dump).
 */
#include "check.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <gmp-sched/gmp.h>

#define WORKERS 16
#define RSA_SIGNS 24
#define EC_SIGNS 100
#define TLS_CLIENTS 16
#define TLS_ROUNDS 12

static int use_goroutines;
static gmp_wg wg = GMP_WG_INIT;
static EVP_PKEY *key;

static void watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "reallib_openssl: hung (watchdog)\n";
    if (write(2, msg, sizeof msg - 1) < 0) {
        /* nothing more to do */
    }
    if (use_goroutines)
        gmp_dump(2);
    _exit(3);
}

static void ssl_fail(const char *what)
{
    fprintf(stderr, "reallib_openssl: %s failed:\n", what);
    ERR_print_errors_fp(stderr);
    _exit(1);
}

/* A worker to start: fn(i). */
struct start {
    void (*fn)(long);
    long i;
};
static void go_start(void *arg)
{
    struct start *s = arg;
    s->fn(s->i);
    free(s);
    gmp_wg_done(&wg);
}
static void *thread_start(void *arg)
{
    struct start *s = arg;
    s->fn(s->i);
    free(s);
    return NULL;
}
/* Starts fn(i) as a goroutine (counted in `wg`) or a pthread, which it returns (mode
 * "thread") for the caller to join or detach. */
static pthread_t start(void (*fn)(long), long i)
{
    struct start *s = malloc(sizeof *s);
    CHECK(s != NULL);
    s->fn = fn;
    s->i = i;
    pthread_t t = 0;
    if (use_goroutines) {
        CHECK_OK(gmp_wg_add(&wg, 1));
        CHECK_OK(gmp_go(go_start, s));
    } else {
        CHECK_EQ(pthread_create(&t, NULL, thread_start, s), 0);
    }
    return t;
}
/* Runs fn(i) for i in 0..n, as goroutines or as pthreads, and waits for all of them (in
 * goroutines, also for every goroutine they started). */
static void run_all(void (*fn)(long), int n)
{
    pthread_t *ts = calloc((size_t)n, sizeof *ts);
    CHECK(ts != NULL);
    for (int i = 0; i < n; i++)
        ts[i] = start(fn, i);
    if (use_goroutines)
        CHECK_OK(gmp_wg_wait(&wg));
    else
        for (int i = 0; i < n; i++)
            CHECK_EQ(pthread_join(ts[i], NULL), 0);
    free(ts);
}

/* ---- signatures with one shared key ---- */

static atomic_long verified, bad;
static unsigned char digests[WORKERS][EC_SIGNS][32]; /* SHA-256 of each signature */

static void sign_one(const char *msg, unsigned char *sig, size_t *siglen)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    CHECK(ctx != NULL);
    if (EVP_DigestSignInit(ctx, NULL, EVP_sha256(), NULL, key) != 1 ||
        EVP_DigestSign(ctx, sig, siglen, (const unsigned char *)msg, strlen(msg)) != 1)
        ssl_fail("EVP_DigestSign");
    EVP_MD_CTX_free(ctx);
}

static int verify_one(const char *msg, const unsigned char *sig, size_t siglen)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    CHECK(ctx != NULL);
    if (EVP_DigestVerifyInit(ctx, NULL, EVP_sha256(), NULL, key) != 1)
        ssl_fail("EVP_DigestVerifyInit");
    int r = EVP_DigestVerify(ctx, sig, siglen, (const unsigned char *)msg, strlen(msg));
    EVP_MD_CTX_free(ctx);
    ERR_clear_error();
    return r == 1;
}

static int signs_per_worker;

static void signer(long id)
{
    unsigned char sig[512];
    char msg[64];
    for (int i = 0; i < signs_per_worker; i++) {
        snprintf(msg, sizeof msg, "worker %ld message %d", id, i);
        size_t siglen = sizeof sig;
        sign_one(msg, sig, &siglen);
        CHECK(siglen > 0 && siglen <= sizeof sig);
        if (verify_one(msg, sig, siglen)) {
            atomic_fetch_add(&verified, 1);
        } else {
            if (atomic_fetch_add(&bad, 1) < 3)
                fprintf(stderr, "worker %ld: signature %d does not verify\n", id, i);
        }
        unsigned int dl = 32;
        CHECK_EQ(EVP_Digest(sig, siglen, digests[id][i], &dl, EVP_sha256(), NULL), 1);
    }
}

/* The main thread's signatures of the workers' messages, made after them: OpenSSL gives
 * the unlocked blinding to the first thread that signs, which must be a worker's. */
static unsigned char ref_digest[WORKERS][RSA_SIGNS][32];

static void reference_signatures(void)
{
    unsigned char sig[512];
    char msg[64];
    for (int w = 0; w < WORKERS; w++)
        for (int i = 0; i < RSA_SIGNS; i++) {
            snprintf(msg, sizeof msg, "worker %d message %d", w, i);
            size_t siglen = sizeof sig;
            sign_one(msg, sig, &siglen);
            unsigned int dl = 32;
            CHECK_EQ(EVP_Digest(sig, siglen, ref_digest[w][i], &dl, EVP_sha256(), NULL), 1);
        }
}

/* ---- TLS ---- */

static SSL_CTX *server_ctx, *client_ctx;
static X509 *cert, *ca_cert;
static EVP_PKEY *ca_key;
static int listen_fd;
static int port;
static atomic_long handshakes, echoed, server_done;

/* A certificate for `pub` named `cn`, signed by `signer` (issuer name `issuer`); with
 * `ca`, marked as a CA. */
static X509 *make_cert(EVP_PKEY *pub, const char *cn, EVP_PKEY *signer, X509 *issuer, int ca)
{
    X509 *x = X509_new();
    CHECK(x != NULL);
    CHECK_EQ(X509_set_version(x, 2), 1);
    CHECK_EQ(ASN1_INTEGER_set(X509_get_serialNumber(x), ca ? 1 : 2), 1);
    CHECK(X509_gmtime_adj(X509_getm_notBefore(x), -3600) != NULL);
    CHECK(X509_gmtime_adj(X509_getm_notAfter(x), 86400) != NULL);
    CHECK_EQ(X509_set_pubkey(x, pub), 1);
    X509_NAME *name = X509_get_subject_name(x);
    CHECK_EQ(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn,
                                        -1, -1, 0),
             1);
    CHECK_EQ(X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name), 1);
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, issuer ? issuer : x, x, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints,
                                              ca ? "critical,CA:TRUE" : "CA:FALSE");
    CHECK(ext != NULL);
    CHECK_EQ(X509_add_ext(x, ext, -1), 1);
    X509_EXTENSION_free(ext);
    if (!ca) {
        ext = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, "DNS:localhost");
        CHECK(ext != NULL);
        CHECK_EQ(X509_add_ext(x, ext, -1), 1);
        X509_EXTENSION_free(ext);
    }
    CHECK(X509_sign(x, signer, EVP_sha256()) > 0);
    return x;
}

/* A P-256 CA and an RSA-2048 (or P-256) server certificate it signs. The server's key
 * signs nothing before the handshakes: OpenSSL gives its unlocked blinding to the first
 * thread that uses it, which must be one of the server's handlers. */
static void make_certs(int ecdsa)
{
    ca_key = EVP_EC_gen("P-256");
    if (ca_key == NULL)
        ssl_fail("CA key generation");
    ca_cert = make_cert(ca_key, "libgmp test CA", ca_key, NULL, 1);
    key = ecdsa ? EVP_EC_gen("P-256") : EVP_RSA_gen(2048);
    if (key == NULL)
        ssl_fail("key generation");
    cert = make_cert(key, "localhost", ca_key, ca_cert, 0);
}

static void make_contexts(void)
{
    server_ctx = SSL_CTX_new(TLS_server_method());
    client_ctx = SSL_CTX_new(TLS_client_method());
    CHECK(server_ctx != NULL && client_ctx != NULL);
    if (SSL_CTX_use_certificate(server_ctx, cert) != 1 ||
        SSL_CTX_use_PrivateKey(server_ctx, key) != 1)
        ssl_fail("loading the server's certificate");
    /* Every handshake a full one: the server signs each time. */
    SSL_CTX_set_session_cache_mode(server_ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_options(server_ctx, SSL_OP_NO_TICKET);
    CHECK_EQ(SSL_CTX_set_num_tickets(server_ctx, 0), 1);
    SSL_CTX_set_session_cache_mode(client_ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_verify(client_ctx, SSL_VERIFY_PEER, NULL);
    CHECK_EQ(X509_STORE_add_cert(SSL_CTX_get_cert_store(client_ctx), ca_cert), 1);
}

static void handler(long fd)
{
    SSL *ssl = SSL_new(server_ctx);
    CHECK(ssl != NULL);
    CHECK_EQ(SSL_set_fd(ssl, (int)fd), 1);
    if (SSL_accept(ssl) != 1)
        ssl_fail("SSL_accept");
    char buf[64];
    int n = SSL_read(ssl, buf, sizeof buf);
    if (n <= 0)
        ssl_fail("SSL_read (server)");
    if (SSL_write(ssl, buf, n) != n)
        ssl_fail("SSL_write (server)");
    /* Wait for the client's close_notify, then answer it. */
    n = SSL_read(ssl, buf, sizeof buf);
    CHECK(n <= 0);
    SSL_shutdown(ssl);
    SSL_free(ssl);
    CHECK_EQ(close((int)fd), 0);
    atomic_fetch_add(&server_done, 1);
}

static void acceptor(long total)
{
    for (long i = 0; i < total; i++) {
        int fd;
        do
            fd = accept(listen_fd, NULL, NULL);
        while (fd < 0 && errno == EINTR);
        CHECK(fd >= 0);
        if (use_goroutines) {
            start(handler, fd);
        } else {
            pthread_t t = start(handler, fd);
            CHECK_EQ(pthread_detach(t), 0);
        }
    }
}

static void client(long id)
{
    for (int r = 0; r < TLS_ROUNDS; r++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        CHECK(fd >= 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        CHECK_EQ(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
        SSL *ssl = SSL_new(client_ctx);
        CHECK(ssl != NULL);
        CHECK_EQ(SSL_set_fd(ssl, fd), 1);
        CHECK_EQ(SSL_set1_host(ssl, "localhost"), 1);
        if (SSL_connect(ssl) != 1) {
            fprintf(stderr, "client %ld round %d: ", id, r);
            ssl_fail("SSL_connect");
        }
        CHECK_EQ(SSL_get_verify_result(ssl), X509_V_OK);
        atomic_fetch_add(&handshakes, 1);
        char line[64], back[64];
        int n = snprintf(line, sizeof line, "client %ld round %d\n", id, r);
        if (SSL_write(ssl, line, n) != n)
            ssl_fail("SSL_write (client)");
        int got = 0;
        while (got < n) {
            int k = SSL_read(ssl, back + got, (int)sizeof back - got);
            if (k <= 0)
                ssl_fail("SSL_read (client)");
            got += k;
        }
        CHECK_EQ(got, n);
        CHECK(memcmp(line, back, (size_t)n) == 0);
        atomic_fetch_add(&echoed, 1);
        SSL_shutdown(ssl);
        SSL_free(ssl);
        CHECK_EQ(close(fd), 0);
    }
}

/* The acceptor runs beside the clients: a goroutine or a thread of its own. */
static void tls_clients_and_acceptor(long which)
{
    if (which == 0)
        acceptor((long)TLS_CLIENTS * TLS_ROUNDS);
    else
        client(which - 1);
}

int main(int argc, char **argv)
{
    CHECK(argc == 3);
    const char *c = argv[1];
    CHECK(strcmp(argv[2], "go") == 0 || strcmp(argv[2], "thread") == 0);
    use_goroutines = strcmp(argv[2], "go") == 0;
    signal(SIGALRM, watchdog);
    signal(SIGPIPE, SIG_IGN);
    alarm(40);
    double t0 = now_sec();
    if (strcmp(c, "rsa") == 0 || strcmp(c, "ecdsa") == 0) {
        int rsa = c[0] == 'r';
        key = rsa ? EVP_RSA_gen(2048) : EVP_EC_gen("P-256");
        if (key == NULL)
            ssl_fail("key generation");
        signs_per_worker = rsa ? RSA_SIGNS : EC_SIGNS;
        t0 = now_sec();
        run_all(signer, WORKERS);
        long total = (long)WORKERS * signs_per_worker;
        if (atomic_load(&bad))
            fprintf(stderr, "%ld of %ld signatures do not verify\n", atomic_load(&bad), total);
        if (rsa) {
            reference_signatures();
            long differ = 0;
            for (int w = 0; w < WORKERS; w++)
                for (int i = 0; i < RSA_SIGNS; i++)
                    differ += memcmp(digests[w][i], ref_digest[w][i], 32) != 0;
            if (differ)
                fprintf(stderr, "%ld of %ld signatures differ from the main thread's\n",
                        differ, total);
            CHECK_EQ(differ, 0);
        }
        CHECK_EQ(atomic_load(&bad), 0);
        CHECK_EQ(atomic_load(&verified), total);
        printf("outcome: %s signed=%ld verified=%ld\n", c, total, atomic_load(&verified));
    } else if (strcmp(c, "tls") == 0 || strcmp(c, "tls_ecdsa") == 0) {
        make_certs(strcmp(c, "tls_ecdsa") == 0);
        make_contexts();
        listen_fd = socket(AF_INET, SOCK_STREAM, 0);
        CHECK(listen_fd >= 0);
        struct sockaddr_in a = {.sin_family = AF_INET};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        CHECK_EQ(bind(listen_fd, (struct sockaddr *)&a, sizeof a), 0);
        socklen_t alen = sizeof a;
        CHECK_EQ(getsockname(listen_fd, (struct sockaddr *)&a, &alen), 0);
        port = ntohs(a.sin_port);
        CHECK_EQ(listen(listen_fd, 256), 0);
        t0 = now_sec();
        run_all(tls_clients_and_acceptor, TLS_CLIENTS + 1);
        long total = (long)TLS_CLIENTS * TLS_ROUNDS;
        /* The handlers of the last connections may still be closing. */
        double deadline = now_sec() + 20;
        while (atomic_load(&server_done) < total && now_sec() < deadline)
            sleep_ms(1);
        CHECK_EQ(atomic_load(&handshakes), total);
        CHECK_EQ(atomic_load(&echoed), total);
        CHECK_EQ(atomic_load(&server_done), total);
        close(listen_fd);
        printf("outcome: %s handshakes=%ld echoed=%ld\n", c, atomic_load(&handshakes),
               atomic_load(&echoed));
    } else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    double dt = now_sec() - t0;
    if (use_goroutines)
        printf("openssl %s in goroutines: %.2f s at GOMAXPROCS=%d\n", c, dt, gmp_maxprocs(0));
    else
        printf("openssl %s on pthreads: %.2f s\n", c, dt);
    return 0;
}
