/* forge_step.c - sends the controller of `llmsys robust run` one step or exit report, as an
 * agent forwards a rank's, with a process id of the caller's choosing: tests/robust/limits.sh
 * forges reports of an earlier launch, which the controller must drop (on_step, and the exit
 * rule in pump).
 *
 * Usage: forge_step ENDPOINT step|exit RANK STEP PID LOSS   (an exit report ignores STEP, LOSS)
 * ENDPOINT is the agents' --controller argument. Exits 0 once the report is handed to a
 * connected controller (1 with one line on stderr when no connection comes within 5 s). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

#include "llmsys/zsec.h"
#include "robust/internal.h"

int main(int argc, char **argv) {
    if (argc != 7 || (strcmp(argv[2], "step") && strcmp(argv[2], "exit"))) {
        fprintf(stderr, "usage: forge_step ENDPOINT step|exit RANK STEP PID LOSS\n");
        return 2;
    }
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "t", argv[2]);
    cJSON_AddNumberToObject(j, "rank", atoi(argv[3]));
    cJSON_AddNumberToObject(j, "pid", atoi(argv[5]));
    cJSON_AddNumberToObject(j, "agent", 0); /* forwarded by node 0's agent */
    if (!strcmp(argv[2], "exit")) {         /* a rank killed by a signal, as the agent reports it */
        cJSON_AddNumberToObject(j, "time", ls_wall_time());
        cJSON_AddStringToObject(j, "status", "signal 9");
    } else {
        float loss = strtof(argv[6], NULL);
        uint32_t u;
        memcpy(&u, &loss, 4);
        char bits[16];
        snprintf(bits, sizeof bits, "%08x", u);
        cJSON_AddNumberToObject(j, "step", atof(argv[4]));
        cJSON_AddNumberToObject(j, "loss", loss);
        cJSON_AddNumberToObject(j, "gn", 1.0);
        cJSON_AddStringToObject(j, "loss_bits", bits);
        cJSON_AddNumberToObject(j, "step_s", 0.01);
        cJSON_AddNumberToObject(j, "snap", -1);
    }

    /* ZMQ_IMMEDIATE: the socket is writable only once the connection is up, so a writable
     * socket means the report reaches the controller, not a queue that linger may drop */
    void *zctx = zmq_ctx_new(), *s = zctx ? zmq_socket(zctx, ZMQ_DEALER) : NULL;
    int one = 1, linger = 5000, rc = s ? 0 : -1;
    if (rc == 0) rc = zmq_setsockopt(s, ZMQ_IMMEDIATE, &one, sizeof one);
    if (rc == 0) rc = zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    if (rc != 0) {
        fprintf(stderr, "forge_step: zmq: %s\n", zmq_strerror(zmq_errno()));
    } else if (ls_zsec_connect(s, argv[1], "forge_step") != LS_OK) {
        fprintf(stderr, "%s\n", ls_errmsg()); /* (names forge_step and the endpoint) */
        rc = -1;
    } else {
        zmq_pollitem_t it = {s, 0, ZMQ_POLLOUT, 0};
        if (zmq_poll(&it, 1, 5000) != 1 || !(it.revents & ZMQ_POLLOUT)) {
            fprintf(stderr, "forge_step: no connection to %s within 5 s\n", argv[1]);
            rc = -1;
        } else if (lsr_send(s, NULL, j, NULL, 0) != LS_OK) {
            fprintf(stderr, "forge_step: %s\n", ls_errmsg());
            rc = -1;
        }
    }
    cJSON_Delete(j);
    if (s) zmq_close(s);
    if (zctx) zmq_ctx_term(zctx); /* waits, up to the linger, until the report is sent */
    return rc == 0 ? 0 : 1;
}
