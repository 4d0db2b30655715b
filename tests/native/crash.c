/* A mapping plugin for the source "crashy" that segfaults on {"kind": "crash"}: run under
 * isolation = "process", the daemon must survive it, keep the event, and restart the child. */
#include <stdlib.h>
#include <string.h>

#include "dstream_plugin.h"

static int has(const char *s, size_t len, const char *needle) {
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(s + i, needle, n) == 0) return 1;
    return 0;
}

static int32_t crashy_map(void *state, const char *raw, size_t len, const char *ctx, size_t ctx_len,
                          char **out, size_t *out_len) {
    (void)state;
    (void)ctx;
    (void)ctx_len;
    if (has(raw, len, "\"crash\"")) {
        volatile int *nowhere = NULL;
        *nowhere = 1; /* SIGSEGV */
    }
    static const char ok[] = "[{\"type\":\"crashy.ok\",\"session_id\":\"crashy\"}]";
    char *buf = malloc(sizeof ok - 1);
    if (!buf) return 1;
    memcpy(buf, ok, sizeof ok - 1);
    *out = buf;
    *out_len = sizeof ok - 1;
    return DS_PLUGIN_OK;
}

static void crashy_free(void *state, char *buf, size_t len) {
    (void)state;
    (void)len;
    free(buf);
}

static const ds_plugin_vtable VTABLE = {
    .abi_version = DS_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(ds_plugin_vtable),
    .name = "crashy",
    .version = "0",
    .sources = "crashy",
    .map = crashy_map,
    .free_buf = crashy_free,
};

const ds_plugin_vtable *dstream_plugin_entry(uint32_t host_abi_version) {
    (void)host_abi_version;
    return &VTABLE;
}
