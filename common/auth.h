/* Shared-secret authentication between workers and servers (libsodium).
 *
 * Both sides hold a token (a file of at least 16 characters). The handshake
 * is mutual challenge-response: the worker's HELLO carries a fresh nonce; the
 * server answers with its own nonce and a MAC over both, proving it holds the
 * token; the worker answers with a MAC over both in the other order. Only
 * MACs cross the network, never the token, and a peer that fails learns
 * nothing about the model (model checks come after authentication). The MAC
 * is HMAC-SHA-256 keyed by a BLAKE2b hash of the token, and comparisons are
 * constant-time. */
#ifndef PS_AUTH_H
#define PS_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define PS_AUTH_KEY_BYTES   32
#define PS_AUTH_NONCE_BYTES 32
#define PS_AUTH_MAC_BYTES   32
#define PS_AUTH_MIN_TOKEN   16

/* Reads the token file and derives the key. The file is opened without
 * blocking and must be a regular file (a link to one is followed), so that
 * a FIFO, a device or a directory named by mistake is refused at once
 * rather than read or waited on. Returns 0 (with *loose set when the file
 * is readable by group or others, worth a warning), or a negative code
 * with a one-line reason in err: -ENOENT/-EACCES, -EINVAL (not a regular
 * file; shorter than PS_AUTH_MIN_TOKEN characters after trailing
 * whitespace, or over 4 KiB), or -ENOMEM if libsodium cannot start. */
int ps_auth_load_key(const char *path, uint8_t key[PS_AUTH_KEY_BYTES], int *loose, char *err,
                     size_t err_len);

/* Fills out with unpredictable bytes. */
void ps_auth_nonce(uint8_t out[PS_AUTH_NONCE_BYTES]);

/* MAC over role || first || second (role: "server" or "worker", so a MAC
 * from one side can never be replayed as the other's). */
void ps_auth_mac(const uint8_t key[PS_AUTH_KEY_BYTES], const char *role,
                 const uint8_t first[PS_AUTH_NONCE_BYTES],
                 const uint8_t second[PS_AUTH_NONCE_BYTES], uint8_t out[PS_AUTH_MAC_BYTES]);

/* 1 when mac (of mac_len bytes, from the network) is right, in constant time. */
int ps_auth_check(const uint8_t key[PS_AUTH_KEY_BYTES], const char *role,
                  const uint8_t first[PS_AUTH_NONCE_BYTES],
                  const uint8_t second[PS_AUTH_NONCE_BYTES], const uint8_t *mac, size_t mac_len);

#endif
