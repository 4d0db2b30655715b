/* A filter that never returns once it sees a "hang" event: dstream must give up on it at the
 * call's deadline, disable it, and keep the event. */
#include <string.h>
#include <unistd.h>

#include "dstream_plugin.h"

static int32_t hang_process(void *state, const char *event, size_t len, char **out, size_t *out_len) {
    (void)state;
    *out = NULL;
    *out_len = 0;
    for (size_t i = 0; i + 4 <= len; i++)
        if (memcmp(event + i, "hang", 4) == 0)
            for (;;) sleep(1);
    return DS_PLUGIN_OK;
}

static const ds_plugin_vtable VTABLE = {
    .abi_version = DS_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(ds_plugin_vtable),
    .name = "hang",
    .version = "0",
    .process = hang_process,
};

const ds_plugin_vtable *dstream_plugin_entry(uint32_t host_abi_version) {
    (void)host_abi_version;
    return &VTABLE;
}
