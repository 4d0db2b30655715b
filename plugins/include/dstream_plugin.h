/*
 * dstream native plugin ABI, version 1.
 *
 * A native plugin is a shared library (.so / .dylib / .dll) in dstream's plugin folder that
 * exports one symbol, `dstream_plugin_entry`, returning a pointer to a static table. The
 * daemon calls the plugin's functions on a thread of its own (never on its async workers),
 * one call at a time, each with the deadline `plugins.call_timeout_ms`; a plugin that fails
 * `plugins.max_consecutive_errors` calls in a row, or does not return in time, is disabled
 * until reloaded, and the events it would have seen are kept (ARCHITECTURE.md, "Failure policy").
 *
 * Events cross as UTF-8 JSON bytes, in the shapes Lua plugins see (README, "Plugins"). Input
 * buffers belong to the daemon and are valid only during the call; they are not
 * NUL-terminated. Output buffers belong to the plugin: the daemon copies them and hands each
 * back to the plugin's `free_buf` before the next call.
 *
 * Every function pointer may be NULL: the plugin then does not take part in that step.
 * Functions return DS_PLUGIN_OK, or any other value for a failure, whose text
 * `last_error(state)` gives (NULL for none).
 *
 * The daemon reads `struct_size` bytes of the table and treats fields beyond them as NULL, so
 * fields may be appended in later versions; it refuses a table whose `abi_version` is not
 * the one it speaks. A library is never unloaded: a reload loads a fresh copy of the file.
 */
#ifndef DSTREAM_PLUGIN_H
#define DSTREAM_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DS_PLUGIN_ABI_VERSION 1u

#define DS_PLUGIN_OK 0

/* flags */
#define DS_PLUGIN_THREAD_SAFE (1u << 0) /* its functions may run on several threads at once */

/* log levels */
#define DS_LOG_ERROR 1
#define DS_LOG_WARN 2
#define DS_LOG_INFO 3
#define DS_LOG_DEBUG 4

/* What the daemon offers a plugin, valid from `init` until `shutdown` returns. */
typedef struct ds_host_api {
    uint32_t abi_version;
    uint32_t struct_size;
    /* A line for the daemon's log, tagged with the plugin's name. */
    void (*log)(int32_t level, const char *msg, size_t len);
    /* Milliseconds since the Unix epoch. */
    uint64_t (*now_ms)(void);
} ds_host_api;

typedef struct ds_plugin_vtable {
    uint32_t abi_version; /* DS_PLUGIN_ABI_VERSION */
    uint32_t struct_size; /* sizeof(ds_plugin_vtable) */
    const char *name;     /* NUL-terminated, static: how dstream names it */
    const char *version;  /* NUL-terminated, static, free-form */
    uint32_t flags;       /* DS_PLUGIN_* flags */
    int32_t priority;     /* order among filters (`process`), lowest first; Lua's default is 0 */
    const char *sources;  /* comma-separated sources it maps (`map`), or NULL */

    /* Called once after loading. `config_json` is the `[plugins.native.<file stem>]` table
     * of the configuration as a JSON object ({} when there is none). `*state` is passed back
     * to every other function. */
    int32_t (*init)(const ds_host_api *host, const char *config_json, size_t config_len,
                    void **state);

    /* A raw source event to normalized events. `ctx_json` is {"source", "session_id"?}.
     * Output: a JSON array of event objects (0..n); NULL output means none. */
    int32_t (*map)(void *state, const char *raw_json, size_t raw_len, const char *ctx_json,
                   size_t ctx_len, char **out_json, size_t *out_len);

    /* A filter: one event in, a JSON array of events out ([] drops it; several split it).
     * NULL output keeps the event unchanged. */
    int32_t (*process)(void *state, const char *event_json, size_t len, char **out_json,
                       size_t *out_len);

    /* A requested tool call: "allow", "deny", "ask", {"action", "reason"} or null (no
     * opinion) as JSON. NULL output means no opinion. */
    int32_t (*decide)(void *state, const char *request_json, size_t len, char **out_json,
                      size_t *out_len);

    /* A committed event (with its lsn); nothing is returned. */
    int32_t (*on_event)(void *state, const char *event_json, size_t len);

    /* Frees a buffer this plugin returned. */
    void (*free_buf)(void *state, char *buf, size_t len);

    /* The last failure's text (NUL-terminated, owned by the plugin), or NULL. */
    const char *(*last_error)(void *state);

    /* Called once before the daemon stops using this copy of the library. */
    void (*shutdown)(void *state);

    /* Appended to version 1 (a table whose struct_size ends before it has none): what leaves
     * the machine through the relay. One stored event in (with its lsn); output: the event
     * to send as a JSON object (changed or not), or JSON null to keep it local. NULL output
     * sends it unchanged; a failure keeps it local. */
    int32_t (*relay)(void *state, const char *event_json, size_t len, char **out_json,
                     size_t *out_len);
} ds_plugin_vtable;

/* The one symbol dstream looks up. `host_abi_version` is the version the daemon speaks; a
 * plugin may return NULL if it cannot serve it. */
const ds_plugin_vtable *dstream_plugin_entry(uint32_t host_abi_version);

#ifdef __cplusplus
}
#endif

#endif /* DSTREAM_PLUGIN_H */
