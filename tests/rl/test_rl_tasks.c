/* test_rl_tasks.c - rewards on hand-made cases, generators checked against independent
 * solutions, the long-tail length law, the JSONL task file (round trip, bad files), and the
 * figure `rl plot` draws of run reports. */
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llmsys/rl.h"
#include "llmsys/train.h"
#include "rl/internal.h"
#include "test.h"

static void test_rewards(void) {
    ls_rl_task t = {"rev:abc=", "cba", LS_RL_REVERSE, 3, 0, NULL};
    CHECK_NEAR(ls_rl_reward(&t, "cba", 3), 1.0, 0);
    CHECK_NEAR(ls_rl_reward(&t, "cbx", 3), 0.5 * 2 / 3, 1e-12);
    CHECK_NEAR(ls_rl_reward(&t, "", 0), 0.0, 0);
    CHECK_NEAR(ls_rl_reward(&t, "cbaaa", 5), 0.5 * 3 / 5, 1e-12); /* too long: penalised */
    CHECK_NEAR(ls_rl_reward(&t, "cb", 2), 0.5 * 2 / 3, 1e-12);
    ls_rl_task a = {"add:47+85=", "7+5+0=12;4+8+1=13;|132", LS_RL_ADD, 2, 1, NULL};
    CHECK_NEAR(ls_rl_reward(&a, a.answer, strlen(a.answer)), 1.0, 0);
    CHECK_NEAR(ls_rl_reward(&a, "|132", 4), 1.0, 0);    /* the final number decides exactness */
    CHECK_NEAR(ls_rl_reward(&a, "x|1|132", 7), 1.0, 0); /* the last '|' */
    CHECK(ls_rl_reward(&a, "7+5+0=12;|133", 13) < 0.5);
    CHECK(ls_rl_reward(&a, "7+5+0=12;4+8+1=13;|131", 22) > 0.45);
}

static void test_generators(void) {
    for (int k = 0; k < LS_RL_KIND_COUNT; k++) {
        ls_rl_gen_opts g = ls_rl_gen_defaults();
        g.kind = k;
        g.n = 200;
        g.max_len = k == LS_RL_ADD ? 9 : 40;
        ls_rl_task *t;
        int n;
        CHECK(ls_rl_tasks_generate(&g, &t, &n) == LS_OK);
        int wrong = 0;
        for (int i = 0; i < n; i++) {
            const char *eq = strchr(t[i].prompt, ':');
            const char *in = eq ? eq + 1 : "";
            size_t L = strlen(in) - 1; /* before '=' */
            char want[1024] = {0};
            if (k == LS_RL_ADD) {
                long long x = 0, y = 0;
                CHECK(sscanf(in, "%lld+%lld=", &x, &y) == 2);
                const char *bar = strrchr(t[i].answer, '|');
                wrong += !bar || atoll(bar + 1) != x + y;
            } else {
                for (size_t j = 0; j < L; j++) want[j] = in[k == LS_RL_REVERSE ? L - 1 - j : j];
                if (k == LS_RL_SORT) /* counting sort, independent of the generator's qsort */
                    for (size_t j = 0, c = 'a'; c <= 'z'; c++)
                        for (size_t q = 0; q < L; q++)
                            if (in[q] == (char)c) want[j++] = (char)c;
                wrong += strcmp(want, t[i].answer) != 0;
            }
            CHECK_NEAR(ls_rl_reward(&t[i], t[i].answer, strlen(t[i].answer)), 1.0, 0);
        }
        CHECK_EQ_INT(wrong, 0);
        ls_rl_tasks_free(t, n);
    }
}

static void test_lengths(void) {
    /* log-normal with mean 20, CV 1: sample mean and CV near, and the expected-max law */
    ls_rl_gen_opts g = ls_rl_gen_defaults();
    g.kind = LS_RL_COPY;
    g.n = 20000;
    g.mean_len = 20;
    g.cv = 1.0;
    g.max_len = 250;
    ls_rl_task *t;
    int n;
    CHECK(ls_rl_tasks_generate(&g, &t, &n) == LS_OK);
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) s += t[i].len, s2 += (double)t[i].len * t[i].len;
    double m = s / n, cv = sqrt(s2 / n - m * m) / m;
    fprintf(stderr, "  lengths: mean %.2f (20), CV %.3f (1.0)\n", m, cv);
    CHECK(fabs(m - 20) < 0.8);
    CHECK(fabs(cv - 1.0) < 0.12);
    ls_rl_tasks_free(t, n);
    /* s = sqrt(ln 2), k = 100: 20·exp(s·sqrt(2 ln 100) − s²/2) by hand */
    double sv = sqrt(log(2.0)), want = 20 * exp(sv * sqrt(2 * log(100.0)) - sv * sv / 2);
    CHECK_NEAR(ls_rl_lognormal_expected_max(20, 1.0, 100), want, 1e-9);
    CHECK(ls_rl_lognormal_expected_max(20, 1.0, 100) > 90);
}

static void write_file(const char *p, const char *s) {
    FILE *f = fopen(p, "w");
    fputs(s, f);
    fclose(f);
}

static void test_files(void) {
    ls_rl_gen_opts g = ls_rl_gen_defaults();
    g.n = 50;
    ls_rl_task *t, *u;
    int n, m;
    CHECK(ls_rl_tasks_generate(&g, &t, &n) == LS_OK);
    CHECK(ls_rl_tasks_write("test_rl_tasks.jsonl", t, n) == LS_OK);
    CHECK(ls_rl_tasks_read("test_rl_tasks.jsonl", &u, &m) == LS_OK);
    CHECK_EQ_INT(m, n);
    for (int i = 0; i < n && i < m; i++) {
        CHECK(!strcmp(t[i].prompt, u[i].prompt) && !strcmp(t[i].answer, u[i].answer));
        CHECK_EQ_INT(t[i].kind, u[i].kind);
    }
    ls_rl_tasks_free(t, n);
    ls_rl_tasks_free(u, m);
    /* without "id" a task's id is its 0-based line number (blank lines count); without "len",
     * its answer's length; without "kind", -1 */
    write_file("test_rl_tasks.jsonl", "{\"prompt\":\"a=\",\"answer\":\"bc\"}\n\n"
                                      "{\"prompt\":\"x=\",\"answer\":\"y\",\"id\":7,\"len\":5}\n");
    CHECK(ls_rl_tasks_read("test_rl_tasks.jsonl", &u, &m) == LS_OK);
    CHECK_EQ_INT(m, 2);
    CHECK(u[0].id == 0 && u[0].len == 2 && u[0].kind == -1);
    CHECK(u[1].id == 7 && u[1].len == 5);
    /* written back (as rl run keeps its copy) and read again: the same tasks, still without a
     * kind (was: written as "kind":"?", which no read accepts) */
    CHECK(ls_rl_tasks_write("test_rl_tasks.jsonl", u, m) == LS_OK);
    ls_rl_tasks_free(u, m);
    CHECK_MSG(ls_rl_tasks_read("test_rl_tasks.jsonl", &u, &m) == LS_OK, "%s", ls_errmsg());
    CHECK(m == 2 && u[0].kind == -1 && u[0].id == 0 && u[0].len == 2 && !strcmp(u[0].answer, "bc"));
    CHECK(m == 2 && u[1].kind == -1 && u[1].id == 7 && u[1].len == 5);
    ls_rl_tasks_free(u, m);
    const char *bad[][2] = {
        {"{\"prompt\":\"a=\",\"answer\":\"b\"}\n{\"prompt\":\"a=\"}\n", ":2:"},
        {"{\"prompt\":\"a=\",\"answer\":\"b\"}\nnot json\n", ":2: invalid JSON"},
        {"{\"prompt\":\"a\\u0001=\",\"answer\":\"b\"}\n", ":1: prompt and answer must be"},
        {"{\"prompt\":\"a=\",\"answer\":\"b\",\"kind\":\"juggle\"}\n", "unknown \"kind\""},
        {"\n\n", "no tasks"},
        {"[1,2]\n", ":1: not a JSON object"},
        {"{\"prompt\":\"a\\u0000=\",\"answer\":\"b\"}\n", ":1: a \\u0000 escape"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file("test_rl_bad.jsonl", bad[i][0]);
        CHECK(ls_rl_tasks_read("test_rl_bad.jsonl", &u, &m) == LS_EFORMAT);
        CHECK_MSG(strstr(ls_errmsg(), bad[i][1]) != NULL, "message '%s' lacks '%s'", ls_errmsg(), bad[i][1]);
    }
    CHECK(ls_rl_tasks_read("no/such/file.jsonl", &u, &m) != LS_OK);
    remove("test_rl_tasks.jsonl");
    remove("test_rl_bad.jsonl");
    int k;
    CHECK(ls_rl_kind_parse("juggle", &k) == LS_EINVAL);
    g.max_len = 0;
    CHECK(ls_rl_tasks_generate(&g, &t, &n) == LS_EINVAL);
}

/* The manager runs on the config and task file its check read: both removed after the check, it
 * still starts (binds and writes its endpoint); it used to read them again and fail. The config
 * names the model its rollouts build; without "model" the manager reads it off init, and a config
 * with neither, or with a bad model, is refused. */
static void test_manager_reads_once(void) {
    const char *cfg = "test_rl_mgr.json", *tasks = "test_rl_mgr.jsonl", *port = "test_rl_mgr.endpoint";
    write_file(tasks, "{\"prompt\":\"a=\",\"answer\":\"b\"}\n");
    ls_rl_worker_opts w = {.role = "manager", .config = cfg, .port_file = port};
    ls_rl_inputs *in = NULL;
    write_file(cfg, "{\"tasks\":\"test_rl_mgr.jsonl\",\"init\":\"no/such.safetensors\"}");
    CHECK(ls_rl_worker_check(&w, &in) == LS_ENOTFOUND && !in);
    CHECK_MSG(strstr(ls_errmsg(), "has no \"model\", and its init") && strstr(ls_errmsg(), "no/such.safetensors"), "%s",
              ls_errmsg());
    write_file(cfg, "{\"tasks\":\"test_rl_mgr.jsonl\",\"model\":{\"vocab\":259,\"n_ctx\":128}}");
    CHECK(ls_rl_worker_check(&w, &in) == LS_EINVAL && !in);
    CHECK_MSG(strstr(ls_errmsg(), "missing key 'n_layer'"), "%s", ls_errmsg());
    ls_model_config mc = ls_rl_model_config();
    ls_model *m;
    CHECK(ls_model_init(&m, &mc, 1) == LS_OK);
    CHECK(ls_ckpt_save("test_rl_mgr.safetensors", m, 0, NULL, 0) == LS_OK);
    ls_model_free(m);
    write_file(cfg, "{\"tasks\":\"test_rl_mgr.jsonl\",\"init\":\"test_rl_mgr.safetensors\",\"updates\":1}");
    CHECK_MSG(ls_rl_worker_check(&w, &in) == LS_OK && in, "%s", ls_errmsg());
    CHECK(in && !memcmp(&in->cfg.model, &mc, sizeof mc));
    ls_rl_inputs_free(in);
    remove("test_rl_mgr.safetensors");
    char *mj = ls_model_config_to_json(&mc), js[512];
    snprintf(js, sizeof js, "{\"tasks\":\"test_rl_mgr.jsonl\",\"updates\":1,\"model\":%s}", mj ? mj : "");
    free(mj);
    write_file(cfg, js);
    remove(port);
    CHECK_MSG(ls_rl_worker_check(&w, &in) == LS_OK && in, "%s", ls_errmsg());
    CHECK(in && !memcmp(&in->cfg.model, &mc, sizeof mc));
    remove(cfg);
    write_file(tasks, "not a task file\n");
    pid_t pid = fork();
    if (pid == 0) _exit(ls_rl_worker(&w, in) == LS_OK ? 0 : 1);
    int up = 0, ended = 0, st;
    for (int i = 0; i < 200 && !up && !ended; i++) { /* 10 s */
        FILE *f = fopen(port, "r");
        up = f && fgetc(f) != EOF;
        if (f) fclose(f);
        ended = !up && waitpid(pid, &st, WNOHANG) == pid; /* it failed */
        if (!up && !ended) usleep(50000);
    }
    CHECK_MSG(up, "the manager did not start on what its check read");
    if (pid > 0 && !ended) kill(pid, SIGKILL), waitpid(pid, &st, 0);
    ls_rl_inputs_free(in);
    remove(tasks);
    remove(port);
}

/* `rl plot`: each report's reward curve and staleness shares where hand-worked geometry puts
 * them (plot area 340 x 220 at (50, 30), histogram at x 450; bars scaled to the tallest share). */
static void test_plot(void) {
    write_file("test_rl_plot_a.json", "{\"mode\":\"laminar\",\"reward_curve\":[0.1,0.5,0.9],\"staleness_hist\":[2,6]}");
    write_file("test_rl_plot_b.json", "{\"mode\":\"sync\",\"reward_curve\":[1.2,-0.5],\"staleness_hist\":[1,1]}");
    const char *rep[] = {"test_rl_plot_a.json", "test_rl_plot_b.json"};
    CHECK_MSG(ls_rl_report_svg(rep, 2, "test_rl_plot.svg") == LS_OK, "%s", ls_errmsg());
    char *svg = NULL;
    size_t n;
    CHECK(ls_file_read("test_rl_plot.svg", &svg, &n) == LS_OK);
    static const char *const want[] = {
        /* a: 3 updates over the width; b: 2 of the 3, clamped to [0, 1] */
        "points=\"50.0,228.0 220.0,140.0 390.0,52.0 \"", "points=\"50.0,30.0 220.0,250.0 \"",
        /* shares 0.25 and 0.75 of a, 0.5 and 0.5 of b, over the tallest (0.75); each bar 85 wide */
        "<rect x=\"450.0\" y=\"176.7\" width=\"85.0\" height=\"73.3\"",
        "<rect x=\"620.0\" y=\"30.0\" width=\"85.0\" height=\"220.0\"",
        "<rect x=\"535.0\" y=\"103.3\" width=\"85.0\" height=\"146.7\"",
        "<rect x=\"705.0\" y=\"103.3\" width=\"85.0\" height=\"146.7\"",
        /* the histogram's axis ends at the tallest share; the curves' at 1 */
        "<text x=\"446\" y=\"34\" text-anchor=\"end\">0.75</text>",
        "<text x=\"46\" y=\"34\" text-anchor=\"end\">1.00</text>", ">laminar</text>", ">sync</text>"};
    for (size_t i = 0; svg && i < sizeof want / sizeof *want; i++)
        CHECK_MSG(strstr(svg, want[i]) != NULL, "the figure lacks %s", want[i]);
    free(svg);
    /* not a report: refused, and the figure already written is kept */
    const char *bad[] = {"test_rl_plot_a.json", "test_rl_tasks.jsonl"};
    write_file("test_rl_tasks.jsonl", "{\"prompt\":\"a=\",\"answer\":\"b\"}\n");
    CHECK(ls_rl_report_svg(bad, 2, "test_rl_plot.svg") < 0);
    CHECK(ls_file_read("test_rl_plot.svg", &svg, &n) == LS_OK && svg && strstr(svg, ">sync</text>"));
    free(svg);
    CHECK(ls_rl_report_svg(rep, 0, "test_rl_plot.svg") == LS_EINVAL);
    remove("test_rl_plot_a.json"), remove("test_rl_plot_b.json"), remove("test_rl_plot.svg");
    remove("test_rl_tasks.jsonl");
}

int main(void) {
    RUN(test_rewards);
    RUN(test_generators);
    RUN(test_lengths);
    RUN(test_files);
    RUN(test_manager_reads_once);
    RUN(test_plot);
    return TEST_RESULT();
}
