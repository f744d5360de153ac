/*
 * resolver.c -- getaddrinfo in goroutines (the runtime's resolver, src/net/).
 *
 *   diff        resolves a table of (node, service, hints) cases, and of getnameinfo
 *               (address, flags, buffer sizes) cases, that this machine's own
 *               configuration answers without the network (numeric hosts, names of
 *               /etc/hosts, services of /etc/services, every AI_* flag combination, bad
 *               arguments) and prints one canonical line per result entry, or the EAI
 *               code; the driver runs it with GMP_INTERPOSE=0 (glibc) and with
 *               GMP_DEBUG=netdns=go and compares the outputs byte for byte.
 *   dns         resolves names through the test's DNS server (GMP_RESOLV_ROOT's
 *               resolv.conf names it) and prints the same dump, which the driver checks.
 *   rcodes      resolves the names the test's server answers with an error code
 *               (SERVFAIL, REFUSED, NOTIMP, FORMERR, REFUSED for AAAA only) and PTR
 *               questions it refuses, and prints the same dump.
 *   gai         resolves names with several IPv4 and IPv6 addresses through the test's
 *               server and prints them in the order given (the driver changes
 *               gai.conf: GMP_RESOLV_ROOT's for the runtime, /etc/gai.conf bind-mounted
 *               in a mount namespace of its own for glibc).
 *
 *               In all three, with GMP_INTERPOSE=0 (glibc answers), the goroutine first
 *               points its thread's resolver state (`_res`) at GMP_RESOLV_ROOT's
 *               resolv.conf (its `nameserver ADDR:PORT`, `search` and `options` lines),
 *               which glibc does not read: the driver compares glibc's output with the
 *               runtime's byte for byte.
 *   addrsel NAME...
 *               resolves each NAME (AF_UNSPEC, and AF_INET6 with AI_V4MAPPED|AI_ALL) and
 *               prints the dump: the driver runs it in a network namespace whose
 *               addresses carry the kernel's flags (deprecated, home), once through the
 *               runtime and once through glibc, and compares the orders.
 *   scale N     N goroutines resolve a name the server answers after 50 ms: all done in
 *               about one round trip, with the thread count at most GOMAXPROCS + 8.
 *   probe NAME  resolves NAME (AF_UNSPEC, SOCK_STREAM) and prints the dump, and how long
 *               it took in whole seconds.
 *
 * Every lookup runs in a goroutine; results are freed with libc's freeaddrinfo.
 */
#include "check.h"

#include <arpa/inet.h>
#include <gmp-sched/gmp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <resolv.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static void dump(const char *node, const char *service, const struct addrinfo *h)
{
    struct addrinfo *res = NULL;
    int r = getaddrinfo(node, service, h, &res);
    printf("[%s|%s", node ? node : "NULL", service ? service : "NULL");
    if (h)
        printf("|f=%d fl=%#x st=%d p=%d]", h->ai_family, (unsigned)h->ai_flags, h->ai_socktype,
               h->ai_protocol);
    else
        printf("|nohints]");
    if (r != 0) {
        printf(" EAI %d\n", r);
        return;
    }
    printf("\n");
    for (struct addrinfo *p = res; p; p = p->ai_next) {
        char a[INET6_ADDRSTRLEN] = "?";
        unsigned port = 0, scope = 0;
        if (p->ai_family == AF_INET) {
            const struct sockaddr_in *s = (const struct sockaddr_in *)p->ai_addr;
            CHECK_EQ(p->ai_addrlen, sizeof *s);
            inet_ntop(AF_INET, &s->sin_addr, a, sizeof a);
            port = ntohs(s->sin_port);
        } else if (p->ai_family == AF_INET6) {
            const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)p->ai_addr;
            CHECK_EQ(p->ai_addrlen, sizeof *s);
            inet_ntop(AF_INET6, &s->sin6_addr, a, sizeof a);
            port = ntohs(s->sin6_port);
            scope = s->sin6_scope_id;
        }
        CHECK_EQ(p->ai_addr->sa_family, p->ai_family);
        printf("  %d %d %d %s %u %u fl=%#x %s\n", p->ai_family, p->ai_socktype, p->ai_protocol,
               a, port, scope, (unsigned)p->ai_flags,
               p->ai_canonname ? p->ai_canonname : "-");
    }
    freeaddrinfo(res);
}

/* getnameinfo of an address, printed with the flags and buffer sizes asked. */
static void dump_ni(const char *addr, unsigned port, unsigned scope, int flags, size_t hostlen,
                    size_t servlen)
{
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof ss);
    if (strchr(addr, ':')) {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
        s->sin6_family = AF_INET6;
        s->sin6_port = htons((uint16_t)port);
        s->sin6_scope_id = scope;
        CHECK_EQ(inet_pton(AF_INET6, addr, &s->sin6_addr), 1);
        len = sizeof *s;
    } else {
        struct sockaddr_in *s = (struct sockaddr_in *)&ss;
        s->sin_family = AF_INET;
        s->sin_port = htons((uint16_t)port);
        CHECK_EQ(inet_pton(AF_INET, addr, &s->sin_addr), 1);
        len = sizeof *s;
    }
    char host[1025] = "unset", serv[64] = "unset";
    int r = getnameinfo((struct sockaddr *)&ss, len, hostlen ? host : NULL, (socklen_t)hostlen,
                        servlen ? serv : NULL, (socklen_t)servlen, flags);
    printf("ni[%s|%u|%u|fl=%#x|%zu|%zu]", addr, port, scope, (unsigned)flags, hostlen, servlen);
    if (r != 0)
        printf(" EAI %d\n", r);
    else
        printf(" %s %s\n", hostlen ? host : "-", servlen ? serv : "-");
}

/* A hostent, or why there is none. */
static void print_hostent(const struct hostent *h)
{
    printf(" %s t=%d l=%d", h->h_name, h->h_addrtype, h->h_length);
    for (char **a = h->h_aliases; *a; a++)
        printf(" alias=%s", *a);
    for (char **a = h->h_addr_list; *a; a++) {
        char text[INET6_ADDRSTRLEN];
        inet_ntop(h->h_addrtype, *a, text, sizeof text);
        printf(" %s", text);
    }
    printf("\n");
}

/* gethostbyname2_r (and gethostbyname_r for AF_INET) with a buffer of `len` bytes, then
 * gethostbyname2. */
static void dump_hb(const char *name, int af, size_t len)
{
    static char buf[8192];
    struct hostent ent, *res = (struct hostent *)1;
    int herr = 12345;
    int r = af == AF_INET ? gethostbyname_r(name, &ent, buf, len, &res, &herr)
                          : gethostbyname2_r(name, af, &ent, buf, len, &res, &herr);
    printf("hb[%s|%d|%zu] r=%d", name, af, len, r);
    if (res == &ent)
        print_hostent(res);
    else
        printf(" res=%s h_errno=%d\n", res ? "?" : "NULL", herr);
    if (len == sizeof buf) {
        struct hostent *h = af == AF_INET ? gethostbyname(name) : gethostbyname2(name, af);
        printf("hb2[%s|%d]", name, af);
        if (h)
            print_hostent(h);
        else
            printf(" NULL h_errno=%d\n", h_errno);
    }
}

/* Names of /etc/hosts on lines with an IPv4 address (at most 4), which the files source
 * answers for AF_UNSPEC and AF_INET without the network. */
static int hosts_names(char names[][64], int max)
{
    FILE *f = fopen("/etc/hosts", "r");
    int n = 0;
    char line[512];
    if (!f)
        return 0;
    while (n < max && fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        char *save = NULL, *addr = strtok_r(line, " \t\n", &save), *name;
        struct in_addr a;
        if (!addr || inet_pton(AF_INET, addr, &a) != 1)
            continue;
        while (n < max && (name = strtok_r(NULL, " \t\n", &save)) != NULL) {
            if (strlen(name) < 64 && strcmp(name, "localhost") != 0) {
                snprintf(names[n++], 64, "%s", name);
                break;
            }
        }
    }
    fclose(f);
    return n;
}

static void run_diff(void)
{
    static const int flagbits[] = {AI_PASSIVE,  AI_CANONNAME, AI_NUMERICHOST, AI_V4MAPPED,
                                   AI_ALL,      AI_ADDRCONFIG, AI_NUMERICSERV};
    /* Every flag combination over a few numeric and absent hosts. */
    static const char *numeric[] = {"127.0.0.1", "::1", NULL, "10.1.2.3", "::ffff:10.1.2.3"};
    static const int families[] = {AF_UNSPEC, AF_INET, AF_INET6};
    for (unsigned m = 0; m < 128; m++) {
        int flags = 0;
        for (unsigned b = 0; b < 7; b++)
            if (m & (1u << b))
                flags |= flagbits[b];
        for (size_t i = 0; i < sizeof numeric / sizeof *numeric; i++)
            for (size_t f = 0; f < 3; f++) {
                struct addrinfo h = {.ai_flags = flags, .ai_family = families[f]};
                dump(numeric[i], "80", &h);
                if (i == 2)
                    dump(NULL, NULL, &h);
            }
    }
    /* Numeric forms glibc reads (inet_aton's, scoped IPv6) and ones it does not. */
    static const char *forms[] = {"1",         "0x7f.1",   "127.1",     "0177.0.0.1", "1.2.3",
                                  "256.1.1.1", "1.2.3.4.", "1.2.3.4 x", "fe80::1%1",  "::",
                                  "0",         "",         "09.1.1.1",  "0x",         "1.0x100"};
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++)
        for (size_t f = 0; f < 3; f++) {
            struct addrinfo h = {.ai_flags = AI_NUMERICHOST, .ai_family = families[f]};
            dump(forms[i], "7", &h);
        }
    /* Services, socket types and protocols. */
    static const char *services[] = {NULL,  "80",     "http",  "domain", "ssh", "0",
                                      "65535", "65536", "-1",   "nosuchsvc", "",  " 80",
                                      "80x", "*",      "snmp", "https"};
    static const int socktypes[] = {0, SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_SEQPACKET, 99};
    static const int protocols[] = {0, IPPROTO_TCP, IPPROTO_UDP, IPPROTO_SCTP, 99};
    for (size_t s = 0; s < sizeof services / sizeof *services; s++)
        for (size_t t = 0; t < sizeof socktypes / sizeof *socktypes; t++)
            for (size_t p = 0; p < sizeof protocols / sizeof *protocols; p++) {
                struct addrinfo h = {.ai_family = AF_INET, .ai_socktype = socktypes[t],
                                     .ai_protocol = protocols[p]};
                dump("127.0.0.1", services[s], &h);
                h.ai_flags = AI_NUMERICSERV;
                dump("127.0.0.1", services[s], &h);
            }
    /* Names of /etc/hosts, in either case, without the network. */
    char names[6][64];
    int n = hosts_names(names, 4);
    snprintf(names[n++], 64, "localhost");
    snprintf(names[n++], 64, "LocalHost");
    for (int i = 0; i < n; i++)
        for (unsigned m = 0; m < 128; m++) {
            int flags = 0;
            for (unsigned b = 0; b < 7; b++)
                if (m & (1u << b))
                    flags |= flagbits[b];
            if (flags & AI_NUMERICHOST)
                continue;
            struct addrinfo h = {.ai_flags = flags, .ai_family = AF_UNSPEC};
            dump(names[i], "http", &h);
            h.ai_family = AF_INET;
            dump(names[i], NULL, &h);
        }
    dump("localhost", "80", NULL);
    dump("127.0.0.1", NULL, NULL);
    /* Bad arguments. */
    struct addrinfo bad = {.ai_flags = 0x800};
    dump("127.0.0.1", "80", &bad);
    bad.ai_flags = AI_CANONNAME;
    dump(NULL, "80", &bad);
    bad.ai_flags = 0;
    bad.ai_family = AF_UNIX;
    dump("127.0.0.1", "80", &bad);
    bad.ai_family = 12345;
    dump("127.0.0.1", "80", &bad);
    dump(NULL, NULL, NULL);
    dump("*", "*", NULL);
    dump("nonexistent.invalid", "80", &(struct addrinfo){.ai_flags = AI_NUMERICHOST});
    dump("127.0.0.1", "http", &(struct addrinfo){.ai_flags = AI_NUMERICSERV});

    /* getnameinfo: 127.0.0.1 by /etc/hosts, other addresses numeric only (no network). */
    static const int niflags[] = {NI_NUMERICHOST, NI_NUMERICSERV, NI_NAMEREQD, NI_DGRAM};
    static const struct {
        const char *addr;
        unsigned port, scope;
        int in_hosts;
    } nis[] = {{"127.0.0.1", 80, 0, 1},  {"127.0.0.1", 53, 0, 1}, {"10.1.2.3", 22, 0, 0},
               {"::1", 443, 0, 0},       {"fe80::1", 7, 1, 0},    {"fe80::1", 7, 999, 0},
               {"ff02::1", 9, 1, 0},     {"2001:db8::5", 65535, 3, 0},
               {"::ffff:10.1.2.3", 0, 0, 0}};
    static const size_t hostlens[] = {1025, 0, 4, 10};
    static const size_t servlens[] = {64, 0, 2, 3};
    for (size_t i = 0; i < sizeof nis / sizeof *nis; i++)
        for (unsigned m = 0; m < 16; m++) {
            int flags = 0;
            for (unsigned b = 0; b < 4; b++)
                if (m & (1u << b))
                    flags |= niflags[b];
            if (!nis[i].in_hosts)
                flags |= NI_NUMERICHOST;
            for (size_t h = 0; h < 4; h++)
                for (size_t v = 0; v < 4; v++)
                    dump_ni(nis[i].addr, nis[i].port, nis[i].scope, flags, hostlens[h], servlens[v]);
        }
    /* gethostbyname and its forms: names of /etc/hosts and numeric ones (AF_INET: a
     * name of IPv4 lines only in AF_INET6 would ask the network). Buffers too small for
     * any layout, or large: between them glibc, which keeps the whole hosts line there,
     * asks for more than the runtime's compact layout needs. */
    static const size_t hblens[] = {8192, 8, 0};
    for (int i = 0; i < n; i++)
        for (size_t l = 0; l < sizeof hblens / sizeof *hblens; l++)
            dump_hb(names[i], AF_INET, hblens[l]);
    dump_hb("127.0.0.1", AF_INET, 8192);
    dump_hb("::1", AF_INET6, 8192);
    dump_hb("1.2.3", AF_INET, 8192);
    dump_hb("localhost", AF_UNIX, 8192);
    dump_ni("127.0.0.1", 80, 0, 0x8000, 1025, 64);
    dump_ni("127.0.0.1", 80, 0, 256, 1025, 64); /* NI_NUMERICSCOPE elsewhere; not glibc's */
    dump_ni("127.0.0.1", 80, 0, NI_NAMEREQD | NI_NUMERICHOST, 0, 0);
    char host[64], serv[16];
    struct sockaddr_in sin = {.sin_family = AF_INET};
    printf("ni short %d\n", getnameinfo((struct sockaddr *)&sin, sizeof sin - 1, host, sizeof host,
                                        serv, sizeof serv, NI_NUMERICHOST));
    sin.sin_family = AF_APPLETALK;
    printf("ni family %d\n", getnameinfo((struct sockaddr *)&sin, sizeof sin, host, sizeof host,
                                         serv, sizeof serv, NI_NUMERICHOST));
    printf("ni null %d\n", getnameinfo(NULL, 0, host, sizeof host, serv, sizeof serv, 0));
}

static void run_dns(void)
{
    static const char *names[] = {"a.test",     "a.test.",  "v4.test",     "alias.test",
                                  "short",       "nx.test",  "nodata.test", "fail.test",
                                  "big.test",    "A.TEST",   "nx"};
    static const int families[] = {AF_UNSPEC, AF_INET, AF_INET6};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        for (size_t f = 0; f < 3; f++) {
            struct addrinfo h = {.ai_family = families[f], .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_CANONNAME};
            dump(names[i], "80", &h);
        }
    struct addrinfo h = {.ai_family = AF_INET6, .ai_socktype = SOCK_STREAM,
                         .ai_flags = AI_V4MAPPED};
    dump("v4.test", NULL, &h);
    h.ai_flags = AI_V4MAPPED | AI_ALL;
    dump("a.test", NULL, &h);
    /* Reverse lookups: PTR records, NXDOMAIN (numeric, or EAI_NONAME with NI_NAMEREQD),
     * SERVFAIL (EAI_AGAIN). */
    dump_ni("10.0.0.1", 80, 0, 0, 1025, 64);
    dump_ni("fd00::1", 53, 0, NI_DGRAM, 1025, 64);
    dump_ni("::ffff:10.0.0.1", 80, 0, 0, 1025, 64);
    dump_ni("10.0.0.99", 80, 0, 0, 1025, 64);
    dump_ni("10.0.0.99", 80, 0, NI_NAMEREQD, 1025, 64);
    dump_ni("10.0.0.66", 80, 0, 0, 1025, 64);
    dump_ni("10.9.8.7", 80, 0, 0, 1025, 64);
    /* gethostbyname and its forms: CNAMEs as aliases, the search list, each failure. */
    static const char *hbnames[] = {"a.test", "alias.test", "short", "nx.test",
                                    "nodata.test", "fail.test", "gmp-only", "big.test"};
    for (size_t i = 0; i < sizeof hbnames / sizeof *hbnames; i++) {
        dump_hb(hbnames[i], AF_INET, 8192);
        dump_hb(hbnames[i], AF_INET6, 8192);
    }
    dump_hb("big.test", AF_INET, 100);
}

/* The names of the server's error answers, by getaddrinfo in each family and by
 * gethostbyname; then addresses whose PTR question it refuses or fails. */
static void run_rcodes(void)
{
    static const char *names[] = {"fail.test", "refused.test", "notimp.test", "formerr.test",
                                  "v4refused.test", "refused", "formerr", "fail"};
    static const int families[] = {AF_UNSPEC, AF_INET, AF_INET6};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        for (size_t f = 0; f < 3; f++) {
            struct addrinfo h = {.ai_family = families[f], .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_CANONNAME};
            dump(names[i], "80", &h);
        }
        dump_hb(names[i], AF_INET, 8192);
        dump_hb(names[i], AF_INET6, 8192);
    }
    dump_ni("10.0.0.67", 80, 0, 0, 1025, 64);
    dump_ni("10.0.0.67", 80, 0, NI_NAMEREQD, 1025, 64);
    dump_ni("10.0.0.66", 80, 0, NI_NAMEREQD, 1025, 64);
}

/* Names whose addresses gai.conf's tables order. */
static void run_gai(void)
{
    static const char *names[] = {"mix.test", "a.test"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        struct addrinfo h = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        dump(names[i], "80", &h);
        h.ai_family = AF_INET6;
        h.ai_flags = AI_V4MAPPED | AI_ALL;
        dump(names[i], "80", &h);
    }
}

/* Points this thread's glibc resolver state at GMP_RESOLV_ROOT's resolv.conf: its
 * nameservers (IPv4, with a port), search list, and the options the test writes. */
static void glibc_use_root_conf(void)
{
    const char *root = getenv("GMP_RESOLV_ROOT");
    CHECK(root != NULL);
    char path[512], line[512];
    snprintf(path, sizeof path, "%s/etc/resolv.conf", root);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    CHECK_EQ(res_init(), 0);
    _res.options = RES_INIT | RES_RECURSE | RES_DEFNAMES | RES_DNSRCH;
    _res.nscount = 0;
    _res.ndots = 1;
    _res.retrans = RES_TIMEOUT;
    _res.retry = RES_DFLRETRY;
    _res.defdname[0] = 0;
    _res.dnsrch[0] = NULL;
    while (fgets(line, sizeof line, f)) {
        char *save = NULL, *key = strtok_r(line, " \t\n", &save), *v;
        if (!key)
            continue;
        if (strcmp(key, "nameserver") == 0) {
            v = strtok_r(NULL, " \t\n", &save);
            CHECK(v != NULL && _res.nscount < MAXNS);
            char *colon = strchr(v, ':');
            CHECK(colon != NULL);
            *colon = 0;
            struct sockaddr_in *sin = &_res.nsaddr_list[_res.nscount++];
            memset(sin, 0, sizeof *sin);
            sin->sin_family = AF_INET;
            sin->sin_port = htons((uint16_t)atoi(colon + 1));
            CHECK_EQ(inet_pton(AF_INET, v, &sin->sin_addr), 1);
        } else if (strcmp(key, "search") == 0) {
            v = strtok_r(NULL, " \t\n", &save);
            CHECK(v != NULL && strlen(v) < sizeof _res.defdname);
            strcpy(_res.defdname, v);
            _res.dnsrch[0] = _res.defdname;
            _res.dnsrch[1] = NULL;
        } else if (strcmp(key, "options") == 0) {
            while ((v = strtok_r(NULL, " \t\n", &save)) != NULL) {
                if (strncmp(v, "timeout:", 8) == 0)
                    _res.retrans = atoi(v + 8);
                else if (strncmp(v, "attempts:", 9) == 0)
                    _res.retry = atoi(v + 9);
                else if (strncmp(v, "ndots:", 6) == 0)
                    _res.ndots = (unsigned)atoi(v + 6);
                else if (strcmp(v, "edns0") == 0)
                    _res.options |= RES_USE_EDNS0;
                else if (strcmp(v, "use-vc") == 0)
                    _res.options |= RES_USEVC;
                else if (strcmp(v, "single-request") == 0)
                    _res.options |= RES_SNGLKUP;
                else if (strcmp(v, "single-request-reopen") == 0)
                    _res.options |= RES_SNGLKUPREOP;
                else if (strcmp(v, "rotate") == 0)
                    _res.options |= RES_ROTATE;
#ifdef RES_TRUSTAD
                else if (strcmp(v, "trust-ad") == 0)
                    _res.options |= RES_TRUSTAD;
#endif
                else
                    CHECK(!"an option this override does not know");
            }
        }
    }
    fclose(f);
    CHECK(_res.nscount > 0);
}

/* Names whose sources' flags order them (the driver's network namespace). */
static void run_addrsel(char **names)
{
    for (; *names; names++) {
        struct addrinfo h = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        dump(*names, "80", &h);
        h.ai_family = AF_INET6;
        h.ai_flags = AI_V4MAPPED | AI_ALL;
        dump(*names, "80", &h);
    }
}

static const char *g_arg;
static char **g_names;
static gmp_wg g_wg = GMP_WG_INIT;
static int g_case;
static int g_ok;

static void runner(void *arg)
{
    (void)arg;
    const char *interpose = getenv("GMP_INTERPOSE");
    if ((g_case == 1 || g_case == 3 || g_case == 4) && interpose && strcmp(interpose, "0") == 0) {
        /* _res is per thread: stay on this one. */
        CHECK_OK(gmp_lock_os_thread());
        glibc_use_root_conf();
    }
    if (g_case == 0)
        run_diff();
    else if (g_case == 1)
        run_dns();
    else if (g_case == 3)
        run_rcodes();
    else if (g_case == 4)
        run_gai();
    else if (g_case == 5)
        run_addrsel(g_names);
    else {
        double t0 = now_sec();
        dump(g_arg, NULL, &(struct addrinfo){.ai_socktype = SOCK_STREAM});
        printf("took %d s\n", (int)(now_sec() - t0));
    }
    fflush(stdout);
    gmp_wg_done(&g_wg);
}

static void slow_lookup(void *arg)
{
    (void)arg;
    struct addrinfo h = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    CHECK_EQ(getaddrinfo("slow.test", "80", &h, &res), 0);
    CHECK(res != NULL && res->ai_next == NULL);
    CHECK_EQ(((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr, inet_addr("10.2.0.1"));
    freeaddrinfo(res);
    __atomic_fetch_add(&g_ok, 1, __ATOMIC_RELAXED);
}

static int threads_now(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    CHECK(d != NULL);
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void run_scale(int n)
{
    int maxthreads = threads_now();
    double t0 = now_sec();
    for (int i = 0; i < n; i++)
        CHECK_OK(gmp_go(slow_lookup, NULL));
    while (__atomic_load_n(&g_ok, __ATOMIC_RELAXED) < n) {
        int t = threads_now();
        if (t > maxthreads)
            maxthreads = t;
        CHECK(now_sec() - t0 < 20);
        usleep(1000);
    }
    double secs = now_sec() - t0;
    long procs = gmp_maxprocs(0);
    printf("scale: %d lookups in %.3f s, at most %d threads (GOMAXPROCS %ld)\n", n, secs,
           maxthreads, procs);
    CHECK(secs < 1.0);
    /* C main and the runtime's threads beside GOMAXPROCS running ones. */
    CHECK(maxthreads <= procs + 8);
}

int main(int argc, char **argv)
{
    CHECK(argc >= 2);
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
    if (strcmp(argv[1], "scale") == 0) {
        CHECK(argc == 3);
        run_scale(atoi(argv[2]));
        return 0;
    }
    if (strcmp(argv[1], "diff") == 0)
        g_case = 0;
    else if (strcmp(argv[1], "dns") == 0)
        g_case = 1;
    else if (strcmp(argv[1], "rcodes") == 0)
        g_case = 3;
    else if (strcmp(argv[1], "gai") == 0)
        g_case = 4;
    else if (strcmp(argv[1], "addrsel") == 0 && argc >= 3) {
        g_case = 5;
        g_names = argv + 2;
    } else if (strcmp(argv[1], "probe") == 0 && argc == 3) {
        g_case = 2;
        g_arg = argv[2];
    } else
        CHECK(!"unknown case");
    CHECK_OK(gmp_wg_add(&g_wg, 1));
    CHECK_OK(gmp_go(runner, NULL));
    CHECK_OK(gmp_wg_wait(&g_wg));
    return 0;
}
