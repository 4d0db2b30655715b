/* A plugin built for another ABI version: dstream must refuse it and stay up. */
#include "dstream_plugin.h"

static const ds_plugin_vtable VTABLE = {
    .abi_version = 99,
    .struct_size = sizeof(ds_plugin_vtable),
    .name = "wrong_abi",
    .version = "0",
};

const ds_plugin_vtable *dstream_plugin_entry(uint32_t host_abi_version) {
    (void)host_abi_version;
    return &VTABLE;
}
