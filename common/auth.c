/* Token loading and MACs for the authenticated handshake (see auth.h). */
#include "auth.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define PS__MAX_TOKEN 4096

int ps_auth_load_key(const char *path, uint8_t key[PS_AUTH_KEY_BYTES], int *loose, char *err,
                     size_t err_len)
{
    unsigned char token[PS__MAX_TOKEN + 1];
    struct stat st;
    size_t n;
    FILE *f;
    int rc = 0;

    if (sodium_init() < 0) {
        snprintf(err, err_len, "libsodium failed to start");
        return -ENOMEM;
    }
    f = fopen(path, "rb");
    if (f == NULL) {
        rc = -errno;
        snprintf(err, err_len, "%s: cannot open the auth token file: %s", path, strerror(errno));
        return rc;
    }
    *loose = fstat(fileno(f), &st) == 0 && (st.st_mode & 077) != 0;
    n = fread(token, 1, sizeof(token), f);
    fclose(f);
    while (n > 0 && (token[n - 1] == '\n' || token[n - 1] == '\r' || token[n - 1] == ' ' ||
                     token[n - 1] == '\t'))
        n--;
    if (n > PS__MAX_TOKEN || n < PS_AUTH_MIN_TOKEN) {
        snprintf(err, err_len, "%s: the auth token must be %d to %d characters; it has %zu", path,
                 PS_AUTH_MIN_TOKEN, PS__MAX_TOKEN, n);
        rc = -EINVAL;
    } else {
        crypto_generichash(key, PS_AUTH_KEY_BYTES, token, n, NULL, 0);
    }
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
