/* Token loading and MACs for the authenticated handshake (see auth.h). */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_error.h"

#define PS__MAX_TOKEN 4096

/* Reads at most len bytes of fd into buf. Returns the count, or -1 with
 * errno set. */
static ssize_t ps__auth_read(int fd, unsigned char *buf, size_t len)
{
    size_t n = 0;

    while (n < len) {
        ssize_t got = read(fd, buf + n, len - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return -1;
        if (got == 0)
            break;
        n += (size_t)got;
    }
    return (ssize_t)n;
}

/* What a file that is not a regular one is, for the refusal. */
static const char *ps__auth_kind(mode_t mode)
{
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "a device";
    return "not a file";
}

int ps_auth_load_key(const char *path, uint8_t key[PS_AUTH_KEY_BYTES], int *loose, char *err,
                     size_t err_len)
{
    unsigned char token[PS__MAX_TOKEN + 1];
    struct stat st;
    ssize_t got;
    size_t n;
    int fd, rc = 0;

    if (sodium_init() < 0) {
        snprintf(err, err_len, "libsodium failed to start");
        return -ENOMEM;
    }
    /* Non-blocking, so that opening a FIFO with no writer (or a terminal)
     * returns at once instead of waiting for one past every timeout; the
     * file type is judged on what was opened. Symbolic links are followed:
     * Kubernetes mounts a Secret's keys as links into its data folder. */
    fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return ps_err_printf(err, err_len, -errno, "%s: cannot open the auth token file: %s", path,
                             strerror(errno));
    if (fstat(fd, &st) < 0) {
        rc = ps_err_printf(err, err_len, -errno, "%s: cannot stat the auth token file: %s", path,
                           strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = ps_err_printf(err, err_len, -EINVAL,
                           "%s: the auth token file must be a regular file; it is %s", path,
                           ps__auth_kind(st.st_mode));
        goto out;
    }
    *loose = (st.st_mode & 077) != 0;
    got = ps__auth_read(fd, token, sizeof(token));
    if (got < 0) {
        rc = ps_err_printf(err, err_len, -errno, "%s: cannot read the auth token file: %s", path,
                           strerror(errno));
        goto out;
    }
    n = (size_t)got;
    while (n > 0 && (token[n - 1] == '\n' || token[n - 1] == '\r' || token[n - 1] == ' ' ||
                     token[n - 1] == '\t'))
        n--;
    if (n > PS__MAX_TOKEN || n < PS_AUTH_MIN_TOKEN)
        rc = ps_err_printf(err, err_len, -EINVAL,
                           "%s: the auth token must be %d to %d characters; it has %zu", path,
                           PS_AUTH_MIN_TOKEN, PS__MAX_TOKEN, n);
    else
        crypto_generichash(key, PS_AUTH_KEY_BYTES, token, n, NULL, 0);
out:
    close(fd);
    sodium_memzero(token, sizeof(token));
    return rc;
}

void ps_auth_nonce(uint8_t out[PS_AUTH_NONCE_BYTES])
{
    randombytes_buf(out, PS_AUTH_NONCE_BYTES);
}

void ps_auth_mac(const uint8_t key[PS_AUTH_KEY_BYTES], const char *role,
                 const uint8_t first[PS_AUTH_NONCE_BYTES],
                 const uint8_t second[PS_AUTH_NONCE_BYTES], uint8_t out[PS_AUTH_MAC_BYTES])
{
    crypto_auth_hmacsha256_state st;

    crypto_auth_hmacsha256_init(&st, key, PS_AUTH_KEY_BYTES);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)role, strlen(role) + 1);
    crypto_auth_hmacsha256_update(&st, first, PS_AUTH_NONCE_BYTES);
    crypto_auth_hmacsha256_update(&st, second, PS_AUTH_NONCE_BYTES);
    crypto_auth_hmacsha256_final(&st, out);
}

int ps_auth_check(const uint8_t key[PS_AUTH_KEY_BYTES], const char *role,
                  const uint8_t first[PS_AUTH_NONCE_BYTES],
                  const uint8_t second[PS_AUTH_NONCE_BYTES], const uint8_t *mac, size_t mac_len)
{
    uint8_t want[PS_AUTH_MAC_BYTES];
    int ok;

    if (mac_len != PS_AUTH_MAC_BYTES)
        return 0;
    ps_auth_mac(key, role, first, second, want);
    ok = crypto_verify_32(want, mac) == 0;
    sodium_memzero(want, sizeof(want));
    return ok;
}
