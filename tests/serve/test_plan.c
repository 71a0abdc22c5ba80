/* test_plan.c - plan file parsing and every refusal FORMATS.md asks for. */
#include "llmsys/serve.h"
#include "test.h"

#define HDR "{\"format\":\"llmsys-plan\",\"version\":1,\"model\":{\"name\":\"m\",\"n_layer\":4},"

static int parse(const char *s, int n_layer, ls_plan *p) { return ls_plan_parse(s, strlen(s), "plan.json", n_layer, p); }

static void expect_fail(const char *s, int n_layer, const char *needle) {
    ls_plan p;
    int rc = parse(s, n_layer, &p);
    CHECK_MSG(rc < 0, "accepted: %s", s);
    CHECK_MSG(strstr(ls_errmsg(), needle) != NULL, "message '%s' lacks '%s'", ls_errmsg(), needle);
}

static void test_good(void) {
    ls_plan p;
    const char *s = HDR "\"stages\":[{\"device\":\"T4\",\"layers\":[0,1],\"bits\":[4],\"address\":\"tcp://h:5\",\"x\":1},"
                        "{\"device\":\"V100\",\"layers\":[1,4],\"bits\":[16,8,3]}],"
                        "\"micro_batch\":{\"prefill\":2,\"decode\":8},\"predicted\":{\"throughput_tok_s\":1.5}}";
    CHECK(parse(s, 4, &p) == LS_OK);
    CHECK_EQ_INT(p.n_stages, 2);
    CHECK_EQ_INT(p.stages[1].layer_begin, 1);
    CHECK_EQ_INT(p.stages[1].bits[2], 3);
    CHECK_EQ_INT(p.mb_prefill, 2);
    CHECK_EQ_INT(p.mb_decode, 8);
    CHECK(!strcmp(p.stages[0].address, "tcp://h:5"));
    CHECK(!strcmp(p.stages[1].device, "V100"));
    /* round trip through the writer */
    CHECK(ls_plan_write("/tmp/llmsys_test_plan.json", &p) == LS_OK);
    ls_plan q;
    CHECK(ls_plan_read("/tmp/llmsys_test_plan.json", 4, &q) == LS_OK);
    CHECK_EQ_INT(q.stages[1].bits[0], 16);
    CHECK_EQ_INT(q.mb_decode, 8);
    ls_plan_free(&q);
    ls_plan_free(&p);
    remove("/tmp/llmsys_test_plan.json");
}

static void test_bad(void) {
    expect_fail(HDR "\"stages\":[{\"layers\":[0,3],\"bits\":[4,4,4]},{\"layers\":[2,4],\"bits\":[4,4]}]}", 4, "overlap");
    expect_fail(HDR "\"stages\":[{\"layers\":[0,1],\"bits\":[4]},{\"layers\":[2,4],\"bits\":[4,4]}]}", 4, "gap");
    expect_fail(HDR "\"stages\":[{\"layers\":[0,2],\"bits\":[4,4]}]}", 4, "gap: layers [2, 4)");
    expect_fail(HDR "\"stages\":[{\"layers\":[0,5],\"bits\":[4,4,4,4,4]}]}", 4, "exceed");
    expect_fail(HDR "\"stages\":[{\"layers\":[0,4],\"bits\":[4,4,5,4]}]}", 4, "unsupported bit width 5");
    expect_fail(HDR "\"stages\":[{\"layers\":[0,4],\"bits\":[4,4,4]}]}", 4, "one width per layer");
    expect_fail(HDR "\"stages\":[{\"layers\":[0,4],\"bits\":[4,4,4,4]}]}", 6, "checkpoint has 6");
    expect_fail(HDR "\"stages\":[{\"layers\":[2,2],\"bits\":[]}]}", 4, "empty");
    expect_fail(HDR "\"stages\":[]}", 4, "stages");
    expect_fail(HDR "\"stages\":[{\"layers\":[0,4],\"bits\":[4,4,4,4]}],\"micro_batch\":{\"decode\":0}}", 4, "micro-batch");
    expect_fail("{\"format\":\"llmsys-profile\",\"version\":1}", 4, "not a plan");
    expect_fail("{\"format\":\"llmsys-plan\",\"version\":2}", 4, "version 2");
    expect_fail("{\"format\": ", 4, "plan.json");
}

int main(void) {
    RUN(test_good);
    RUN(test_bad);
    return TEST_RESULT();
}
