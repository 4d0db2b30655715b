/*
 * bash_guard: an example dstream native plugin in C.
 *
 *   process: tags requested Bash tool calls whose text contains a pattern
 *            (config `pattern`, default "sudo") with metadata.tags = ["bash-guard"];
 *   decide:  denies a tool call that pipes a download into a shell (`curl ... | sh`).
 *
 * Build:  cc -shared -fPIC -O2 -I plugins/include -o bash_guard.so plugins/examples/c/bash_guard.c
 * Then put bash_guard.so in dstream's plugin folder; configure it with
 *   [plugins.native.bash_guard]
 *   pattern = "rm -rf"
 *
 * It works on the JSON text directly, to stay dependency-free: a real plugin would use a JSON
 * library. The tag is inserted into the event's top-level "metadata" object, which the
 * pipeline always fills before filters run.
 */
#include <stdlib.h>
#include <string.h>

#include "dstream_plugin.h"

#ifndef BASH_GUARD_TAG
#define BASH_GUARD_TAG "bash-guard"
#endif

typedef struct {
    char pattern[256];
    char error[256];
    const ds_host_api *host;
} guard;

static void set_error(guard *g, const char *msg) {
    strncpy(g->error, msg, sizeof g->error - 1);
    g->error[sizeof g->error - 1] = 0;
}

/* Does `hay` (len bytes, not NUL-terminated) contain `needle`? */
static int contains(const char *hay, size_t len, const char *needle) {
    size_t n = strlen(needle);
    if (n == 0 || n > len) return n == 0;
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(hay + i, needle, n) == 0) return 1;
    return 0;
}

/* The offset just after the `{` of the top-level "metadata" object, or 0 if there is none. */
static size_t metadata_body(const char *json, size_t len) {
    int depth = 0, in_str = 0, expect_key = 0;
    size_t key_start = 0;
    for (size_t i = 0; i < len; i++) {
        char c = json[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') {
                in_str = 0;
                if (depth == 1 && expect_key && i - key_start == 9 &&
                    memcmp(json + key_start, "\"metadata", 9) == 0) {
                    size_t j = i + 1;
                    while (j < len && (json[j] == ' ' || json[j] == ':')) j++;
                    if (j < len && json[j] == '{') return j + 1;
                }
            }
            continue;
        }
        switch (c) {
        case '"': in_str = 1; key_start = i; break;
        case '{': case '[': depth++; expect_key = (c == '{' && depth == 1); break;
        case '}': case ']': depth--; break;
        case ',': if (depth == 1) expect_key = 1; break;
        case ':': if (depth == 1) expect_key = 0; break;
        default: break;
        }
    }
    return 0;
}

static int32_t guard_init(const ds_host_api *host, const char *config, size_t len, void **state) {
    guard *g = calloc(1, sizeof *g);
    if (!g) return 1;
    g->host = host;
    strcpy(g->pattern, "sudo");
    /* A naive read of {"pattern":"..."}: enough for an example. */
    const char *key = "\"pattern\":\"";
    for (size_t i = 0; i + strlen(key) <= len; i++) {
        if (memcmp(config + i, key, strlen(key)) == 0) {
            size_t start = i + strlen(key), end = start;
            while (end < len && config[end] != '"') end++;
            size_t n = end - start < sizeof g->pattern - 1 ? end - start : sizeof g->pattern - 1;
            memcpy(g->pattern, config + start, n);
            g->pattern[n] = 0;
            break;
        }
    }
    if (host && host->log) {
        const char msg[] = "bash_guard ready";
        host->log(DS_LOG_INFO, msg, sizeof msg - 1);
    }
    *state = g;
    return DS_PLUGIN_OK;
}

static int32_t guard_process(void *state, const char *event, size_t len, char **out, size_t *out_len) {
    guard *g = state;
    *out = NULL;
    *out_len = 0;
    if (!contains(event, len, "\"type\":\"execution.tool_use\"") ||
        !contains(event, len, "\"tool\":\"Bash\"") || !contains(event, len, g->pattern))
        return DS_PLUGIN_OK; /* unchanged */
    size_t at = metadata_body(event, len);
    if (at == 0) {
        set_error(g, "the event has no metadata object");
        return 1;
    }
    static const char tag[] = "\"tags\":[\"" BASH_GUARD_TAG "\"],";
    size_t n = 1 + len + sizeof tag - 1 + 1;
    char *buf = malloc(n);
    if (!buf) return 1;
    size_t k = 0;
    buf[k++] = '[';
    memcpy(buf + k, event, at);
    k += at;
    memcpy(buf + k, tag, sizeof tag - 1);
    k += sizeof tag - 1;
    /* An empty metadata object would leave a trailing comma. */
    if (event[at] == '}') k--;
    memcpy(buf + k, event + at, len - at);
    k += len - at;
    buf[k++] = ']';
    *out = buf;
    *out_len = k;
    return DS_PLUGIN_OK;
}

static int32_t guard_decide(void *state, const char *request, size_t len, char **out, size_t *out_len) {
    (void)state;
    *out = NULL;
    *out_len = 0;
    if (contains(request, len, "curl") && (contains(request, len, "| sh") || contains(request, len, "|sh") ||
                                           contains(request, len, "| bash"))) {
        static const char deny[] =
            "{\"action\":\"deny\",\"reason\":\"bash_guard: piping a download into a shell\"}";
        char *buf = malloc(sizeof deny - 1);
        if (!buf) return 1;
        memcpy(buf, deny, sizeof deny - 1);
        *out = buf;
        *out_len = sizeof deny - 1;
    }
    return DS_PLUGIN_OK;
}

static void guard_free(void *state, char *buf, size_t len) {
    (void)state;
    (void)len;
    free(buf);
}

static const char *guard_last_error(void *state) {
    guard *g = state;
    return g && g->error[0] ? g->error : NULL;
}

static void guard_shutdown(void *state) { free(state); }

static const ds_plugin_vtable VTABLE = {
    .abi_version = DS_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(ds_plugin_vtable),
    .name = "bash_guard",
    .version = "1.0",
    .flags = 0,
    .priority = 10,
    .sources = NULL,
    .init = guard_init,
    .map = NULL,
    .process = guard_process,
    .decide = guard_decide,
    .on_event = NULL,
    .free_buf = guard_free,
    .last_error = guard_last_error,
    .shutdown = guard_shutdown,
};

const ds_plugin_vtable *dstream_plugin_entry(uint32_t host_abi_version) {
    return host_abi_version == DS_PLUGIN_ABI_VERSION ? &VTABLE : NULL;
}
