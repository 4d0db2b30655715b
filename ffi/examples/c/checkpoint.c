/* A checkpoint round trip: open one, print its id, wait for a person's decision
 * (`dstream approve ID` or `dstream reject ID` from another terminal), print it.
 * Run: ./checkpoint [SOCKET] [SESSION] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstream.h"

int main(int argc, char **argv) {
    const char *socket = argc > 1 ? argv[1] : NULL;
    const char *session = argc > 2 ? argv[2] : "c-checkpoint";
    ds_client *c = NULL;
    if (ds_client_connect(socket, &c) != DS_OK) return 1;
    char params[512];
    snprintf(params, sizeof params,
             "{\"session_id\":\"%s\",\"key\":\"deploy-1\",\"summary\":\"deploy build 1 to staging\","
             "\"options\":[\"approve\",\"reject\"],\"timeout_ms\":60000}",
             session);
    char *cp = NULL;
    if (ds_checkpoint_request(c, params, &cp) != DS_OK) return 1;
    const char *p = strstr(cp, "\"id\":\"");
    char id[64] = {0};
    if (p) sscanf(p + 6, "%63[^\"]", id);
    ds_string_free(cp);
    printf("waiting for %s\n", id);
    fflush(stdout);
    char *done = NULL;
    ds_result r = ds_checkpoint_await(c, id, 60000, &done);
    if (r != DS_OK && r != DS_ERR_TIMEOUT) return 1;
    const char *state = strstr(done, "\"state\":\"");
    char st[32] = {0};
    if (state) sscanf(state + 9, "%31[^\"]", st);
    printf("decided: %s\n", st);
    ds_string_free(done);
    ds_client_free(c);
    return 0;
}
