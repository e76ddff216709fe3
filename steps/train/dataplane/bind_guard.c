/*
 * bind_guard: an LD_PRELOAD library that keeps a process's listening sockets on one address.
 *
 * tf.data.service has no bind-address option: its dispatcher and workers listen on
 * "0.0.0.0:<port>" (or "[::]:<port>"), every interface, without authentication. Preloaded
 * into a TensorFlow host (steps/train/bind_guard.py), this library rewrites a bind() to the
 * wildcard address into a bind() to HETERO_BIND_ADDRESS, the host's own cluster address
 * (IPv4; for a dual-stack IPv6 socket its IPv4-mapped form). Every other bind() is untouched.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn real_bind;
    if (!real_bind) real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    const char *only = getenv("HETERO_BIND_ADDRESS");
    struct in_addr v4;
    if (!addr || !only || inet_pton(AF_INET, only, &v4) != 1) return real_bind(fd, addr, len);
    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in in4;
        memcpy(&in4, addr, sizeof in4);
        if (in4.sin_addr.s_addr == htonl(INADDR_ANY)) {
            in4.sin_addr = v4;
            return real_bind(fd, (const struct sockaddr *)&in4, sizeof in4);
        }
    } else if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 in6;
        memcpy(&in6, addr, sizeof in6);
        if (IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr)) {
            memset(&in6.sin6_addr, 0, sizeof in6.sin6_addr);
            in6.sin6_addr.s6_addr[10] = 0xff;
            in6.sin6_addr.s6_addr[11] = 0xff;
            memcpy(&in6.sin6_addr.s6_addr[12], &v4, sizeof v4);
            return real_bind(fd, (const struct sockaddr *)&in6, sizeof in6);
        }
    }
    return real_bind(fd, addr, len);
}
