/* A native relay filter for the tests: private notes stay local, "hunter2" is masked in what
 * leaves, everything else is sent unchanged. */
#include <stdlib.h>
#include <string.h>

#include "dstream_plugin.h"

static const char *find(const char *hay, size_t len, const char *needle) {
    size_t n = strlen(needle);
    for (size_t i = 0; n <= len && i <= len - n; i++) {
        if (memcmp(hay + i, needle, n) == 0) {
            return hay + i;
        }
    }
    return NULL;
}

static int32_t relay(void *state, const char *event, size_t len, char **out, size_t *out_len) {
    (void)state;
    if (find(event, len, "\"type\":\"note.private\"")) {
        *out = malloc(4);
        memcpy(*out, "null", 4);
        *out_len = 4;
        return DS_PLUGIN_OK;
    }
    const char *secret = find(event, len, "hunter2");
    if (secret) {
        *out = malloc(len);
        memcpy(*out, event, len);
        memcpy(*out + (secret - event), "*******", 7);
        *out_len = len;
    }
    return DS_PLUGIN_OK;
}

static void free_buf(void *state, char *buf, size_t len) {
    (void)state;
    (void)len;
    free(buf);
}

static const ds_plugin_vtable VTABLE = {
    .abi_version = DS_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(ds_plugin_vtable),
    .name = "relay_guard",
    .version = "1",
    .free_buf = free_buf,
    .relay = relay,
};

const ds_plugin_vtable *dstream_plugin_entry(uint32_t host_abi_version) {
    (void)host_abi_version;
    return &VTABLE;
}
