/* The row index: linear probing with backward-shift removal (see
 * row_map.h). */
#include "row_map.h"

#include <errno.h>
#include <stdlib.h>

typedef struct {
    uint64_t id;
    uint32_t slot; /* PS_ROW_NO_SLOT: empty */
    uint32_t pad;
} ps__row_map_entry;

struct ps_row_map {
    ps__row_map_entry *e;
    size_t mask; /* capacity - 1 */
    size_t count;
    int shift; /* 64 - log2(capacity): the hash's top bits pick the bucket */
};

#define PS__MIN_CAPACITY 64

/* MurmurHash3's 64-bit finaliser: a different function from placement's
 * SplitMix64 (other shifts and multipliers), so the buckets of one server's
 * IDs are independent of the hash bits that sent them there. */
static uint64_t ps__bucket_hash(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static size_t ps__bucket(const ps_row_map *m, uint64_t id)
{
    return (size_t)(ps__bucket_hash(id) >> m->shift);
}

static ps__row_map_entry *ps__row_map_alloc(size_t capacity)
{
    ps__row_map_entry *e = malloc(capacity * sizeof(ps__row_map_entry));

    if (!e)
        return NULL;
    for (size_t i = 0; i < capacity; i++)
        e[i].slot = PS_ROW_NO_SLOT;
    return e;
}

static int ps__log2(size_t capacity)
{
    int k = 0;
    while (((size_t)1 << k) < capacity)
        k++;
    return k;
}

/* The capacity that holds count entries at most 3/4 full. */
static size_t ps__capacity_for(size_t count)
{
    size_t capacity = PS__MIN_CAPACITY;

    while (capacity / 4 * 3 < count)
        capacity *= 2;
    return capacity;
}

int ps_row_map_create(ps_row_map **out, size_t expect)
{
    size_t capacity;
    ps_row_map *m;

    *out = NULL;
    if (expect > ((size_t)1 << 31))
        return -E2BIG;
    capacity = ps__capacity_for(expect);
    m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->e = ps__row_map_alloc(capacity);
    if (!m->e) {
        free(m);
        return -ENOMEM;
    }
    m->mask = capacity - 1;
    m->shift = 64 - ps__log2(capacity);
    *out = m;
    return 0;
}

void ps_row_map_free(ps_row_map *m)
{
    if (!m)
        return;
    free(m->e);
    free(m);
}

uint32_t ps_row_map_find(const ps_row_map *m, uint64_t id)
{
    for (size_t i = ps__bucket(m, id);; i = (i + 1) & m->mask) {
        const ps__row_map_entry *e = &m->e[i];
        if (e->slot == PS_ROW_NO_SLOT)
            return PS_ROW_NO_SLOT;
        if (e->id == id)
            return e->slot;
    }
}

void ps_row_map_prefetch(const ps_row_map *m, uint64_t id)
{
    __builtin_prefetch(&m->e[ps__bucket(m, id)]);
}

/* Places id -> slot in the first empty entry from its bucket; the caller
 * knows id is absent and the array has room. */
static void ps__row_map_place(ps_row_map *m, uint64_t id, uint32_t slot)
{
    size_t i = ps__bucket(m, id);

    while (m->e[i].slot != PS_ROW_NO_SLOT)
        i = (i + 1) & m->mask;
    m->e[i] = (ps__row_map_entry){.id = id, .slot = slot};
}

/* Rehashes into an array of capacity entries (larger than now). */
static int ps__resize(ps_row_map *m, size_t capacity)
{
    size_t old_capacity = m->mask + 1;
    ps__row_map_entry *old = m->e, *e;

    e = ps__row_map_alloc(capacity);
    if (!e)
        return -ENOMEM;
    m->e = e;
    m->mask = capacity - 1;
    m->shift = 64 - ps__log2(capacity);
    for (size_t i = 0; i < old_capacity; i++)
        if (old[i].slot != PS_ROW_NO_SLOT)
            ps__row_map_place(m, old[i].id, old[i].slot);
    free(old);
    return 0;
}

int ps_row_map_insert(ps_row_map *m, uint64_t id, uint32_t slot)
{
    int rc;

    if (slot == PS_ROW_NO_SLOT)
        return -EINVAL;
    if (ps_row_map_find(m, id) != PS_ROW_NO_SLOT)
        return -EEXIST;
    if ((rc = ps_row_map_reserve(m, m->count + 1)) < 0)
        return rc;
    ps__row_map_place(m, id, slot);
    m->count++;
    return 0;
}

int ps_row_map_reserve(ps_row_map *m, size_t count)
{
    size_t capacity;

    if (count > ((size_t)1 << 31))
        return -E2BIG;
    if (count <= (m->mask + 1) / 4 * 3)
        return 0;
    /* Doubling at least, so that one insert at a time grows geometrically. */
    capacity = ps__capacity_for(count);
    if (capacity < 2 * (m->mask + 1))
        capacity = 2 * (m->mask + 1);
    return ps__resize(m, capacity);
}

int ps_row_map_remove(ps_row_map *m, uint64_t id)
{
    size_t i = ps__bucket(m, id), j;

    while (m->e[i].id != id || m->e[i].slot == PS_ROW_NO_SLOT) {
        if (m->e[i].slot == PS_ROW_NO_SLOT)
            return -ENOENT;
        i = (i + 1) & m->mask;
    }
    /* Backward shift: pull each later entry of the run into the hole when
     * its bucket is not between the hole and it (cyclically), so every
     * entry stays reachable from its bucket without gaps. */
    for (j = (i + 1) & m->mask; m->e[j].slot != PS_ROW_NO_SLOT; j = (j + 1) & m->mask) {
        size_t home = ps__bucket(m, m->e[j].id);
        if (((j - home) & m->mask) >= ((j - i) & m->mask)) {
            m->e[i] = m->e[j];
            i = j;
        }
    }
    m->e[i].slot = PS_ROW_NO_SLOT;
    m->count--;
    return 0;
}

size_t ps_row_map_count(const ps_row_map *m)
{
    return m->count;
}

size_t ps_row_map_bytes(const ps_row_map *m)
{
    return sizeof(*m) + (m->mask + 1) * sizeof(ps__row_map_entry);
}
