/* steal_test.h - helpers shared by the steal tests. */
#ifndef STEAL_TEST_H
#define STEAL_TEST_H

#include "llmsys/steal.h"

/* The server's defaults with inputs in the model's [0, 1] (the tests' rows are already scaled). */
static inline ls_victim_server_opts scaled_server_opts(void) {
    ls_victim_server_opts o;
    ls_victim_server_opts_default(&o);
    o.model_units = 1;
    return o;
}

#endif
