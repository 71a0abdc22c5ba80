/* test_plan_file.c - the plan file (docs/plan-format.md): parsing, every refusal, the
 * writer, and the planner's files read back by the same codec that serve uses. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmsys/plan.h"
#include "test.h"

#define HDR "{\"format\":\"llmsys-plan\",\"version\":1,\"model\":{\"name\":\"m\",\"n_layer\":4},"

static char tmpdir[256];

static int parse(const char *s, int n_layer, ls_plan *p) {
    return ls_plan_parse(s, strlen(s), "plan.json", n_layer, p);
}

static void expect_fail(const char *s, int n_layer, const char *needle) {
    ls_plan p;
    int rc = parse(s, n_layer, &p);
    CHECK_MSG(rc < 0, "accepted: %s", s);
    CHECK_MSG(strstr(ls_errmsg(), needle) != NULL, "message '%s' lacks '%s'", ls_errmsg(), needle);
}

static void test_good(void) {
    ls_plan p, q;
    const char *s =
        HDR "\"stages\":[{\"device\":\"T4\",\"layers\":[0,1],\"bits\":[4],\"address\":\"tcp://h:5\",\"x\":1},"
            "{\"device\":\"V100\",\"layers\":[1,4],\"bits\":[16,8,3]}],"
            "\"micro_batch\":{\"prefill\":2,\"decode\":8},\"predicted\":{\"throughput_tok_s\":1.5}}";
    CHECK(parse(s, 4, &p) == LS_OK);
    CHECK_EQ_INT(p.n_layer, 4);
    CHECK_EQ_INT(p.n_stages, 2);
    CHECK_EQ_INT(p.stages[1].layer_begin, 1);
    CHECK_EQ_INT(p.stages[1].layer_end, 4);
    const int want[4] = {4, 16, 8, 3};
    for (int l = 0; l < 4; l++) CHECK_EQ_INT(p.bits[l], want[l]);
    CHECK_EQ_INT(p.mb_prefill, 2);
    CHECK_EQ_INT(p.mb_decode, 8);
    CHECK_EQ_INT(p.group, 0);
    CHECK(!strcmp(p.model_name, "m"));
    CHECK(!strcmp(p.stages[0].address, "tcp://h:5"));
    CHECK(!strcmp(p.stages[1].address, ""));
    CHECK(!strcmp(p.stages[1].device, "V100"));
    /* round trip through the writer, with a group */
    char path[300];
    snprintf(path, sizeof path, "%s/plan.json", tmpdir);
    p.group = 128;
    CHECK(ls_plan_write(path, &p) == LS_OK);
    CHECK(ls_plan_read(path, 4, &q) == LS_OK);
    CHECK(!memcmp(&p, &q, sizeof p)); /* both zeroed beyond what the file holds */
    /* defaults: micro-batches 1 and 8, no group; 32 bits = fp32 as it is */
    CHECK(parse(HDR "\"stages\":[{\"layers\":[0,4],\"bits\":[32,32,4,32]}]}", 0, &p) == LS_OK);
    CHECK_EQ_INT(p.mb_prefill, 1);
    CHECK_EQ_INT(p.mb_decode, 8);
    CHECK_EQ_INT(p.bits[0], 32);
    /* one-stage plans */
    int b[3] = {8, 4, 32};
    CHECK(ls_plan_single(&p, 3, b, 2, 5) == LS_OK);
    CHECK_EQ_INT(p.n_stages, 1);
    CHECK_EQ_INT(p.stages[0].layer_end, 3);
    CHECK_EQ_INT(p.bits[2], 32);
    b[1] = 7;
    CHECK(ls_plan_single(&p, 3, b, 2, 5) == LS_EINVAL);
}

static void test_bad(void) {
    expect_fail(HDR "\"stages\":[{\"layers\":[0,3],\"bits\":[4,4,4]},{\"layers\":[2,4],\"bits\":[4,4]}]}", 4,
                "overlap");
    expect_fail(HDR "\"stages\":[{\"layers\":[0,1],\"bits\":[4]},{\"layers\":[2,4],\"bits\":[4,4]}]}", 4, "gap");
    expect_fail(HDR "\"stages\":[{\"layers\":[0,2],\"bits\":[4,4]}]}", 4, "gap: layers [2, 4)");
    expect_fail(HDR "\"stages\":[{\"layers\":[0,5],\"bits\":[4,4,4,4,4]}]}", 4, "exceed");
    expect_fail(HDR "\"stages\":[{\"layers\":[0,4],\"bits\":[4,4,5,4]}]}", 4, "unsupported bit width 5");
    expect_fail(HDR "\"stages\":[{\"layers\":[0,4],\"bits\":[4,\"4\",4,4]}]}", 4, "(not a number)");
    expect_fail(HDR "\"stages\":[{\"layers\":[0,4],\"bits\":[4,4,4]}]}", 4, "one width per layer");
    expect_fail(HDR "\"stages\":[{\"layers\":[0,4],\"bits\":[4,4,4,4,4]}]}", 4, "one width per layer");
    expect_fail(HDR "\"stages\":[{\"layers\":[0,4],\"bits\":[4,4,4,4]}]}", 6, "checkpoint has 6");
    expect_fail(HDR "\"stages\":[{\"layers\":[2,2],\"bits\":[]}]}", 4, "empty");
    expect_fail(HDR "\"stages\":[{\"layers\":[0.5,4],\"bits\":[4,4,4,4]}]}", 4, "integers");
    expect_fail(HDR "\"stages\":[]}", 4, "stages");
    expect_fail(HDR "\"stages\":[{\"layers\":[0,4],\"bits\":[4,4,4,4]}],\"micro_batch\":{\"decode\":0}}", 4,
                "micro-batch");
    expect_fail(HDR "\"stages\":[{\"layers\":[0,4],\"bits\":[4,4,4,4]}],\"micro_batch\":3}", 4, "micro_batch");
    expect_fail(HDR "\"stages\":[{\"layers\":[0,4],\"bits\":[4,4,4,4]}],\"group\":48}", 4, "group 48");
    expect_fail("{\"format\":\"llmsys-plan\",\"version\":1,\"model\":{\"n_layer\":0},\"stages\":[]}", 4, "n_layer");
    expect_fail("{\"format\":\"llmsys-profile\",\"version\":1}", 4, "not a plan");
    expect_fail("{\"format\":\"llmsys-plan\",\"version\":2}", 4, "version 2");
    expect_fail("{\"format\": ", 4, "plan.json");
    expect_fail("[1, 2]", 4, "JSON object");
    /* the validator on plans built in memory */
    ls_plan p;
    int b[4] = {4, 4, 4, 4};
    CHECK(ls_plan_single(&p, 4, b, 1, 1) == LS_OK);
    p.n_stages = 2;
    p.stages[0].layer_end = 2;
    p.stages[1].layer_begin = 1;
    p.stages[1].layer_end = 4;
    CHECK(ls_plan_validate(&p, "mem") == LS_EINVAL && strstr(ls_errmsg(), "mem: stage 1") &&
          strstr(ls_errmsg(), "overlap"));
    p.stages[1].layer_begin = 2;
    CHECK(ls_plan_validate(&p, "mem") == LS_OK);
    p.n_stages = 0;
    CHECK(ls_plan_validate(&p, "mem") == LS_EINVAL);
    char path[300];
    snprintf(path, sizeof path, "%s/never.json", tmpdir);
    CHECK(ls_plan_write(path, &p) == LS_EINVAL && access(path, F_OK) != 0); /* nothing written */
}

/* The planner's plan file is read back by the codec serve uses: the same stages, devices and
 * bits, and the planner's own reader rebuilds the same plan and prediction. */
/* opt-30b on llmpq-2 (3 T4s, a V100), batch 32, prompt 512, 100 generated: the problem and
 * splitquant's plan. */
typedef struct {
    ls_plan_catalog *cat;
    ls_plan_cluster *cl;
    ls_plan_arch a;
    ls_plan_problem *pb;
    ls_plan_result *pl;
} llmpq2;

static void llmpq2_open(llmpq2 *f) {
    CHECK(ls_plan_catalog_load(NULL, &f->cat) == LS_OK);
    CHECK(ls_plan_cluster_load(f->cat, "llmpq-2", &f->cl) == LS_OK);
    CHECK(ls_plan_catalog_model(f->cat, "opt-30b", &f->a) == LS_OK);
    f->pb = malloc(sizeof *f->pb);
    f->pl = malloc(sizeof *f->pl);
    CHECK(ls_plan_problem_init(f->pb, &f->a, f->cl, (ls_plan_workload){32, 512, 100}) == LS_OK);
    CHECK(ls_plan_solve(f->pb, LS_PLAN_ALGO_SPLITQUANT, f->pl) == LS_OK);
}

static void llmpq2_close(llmpq2 *f) {
    free(f->pb);
    free(f->pl);
    ls_plan_cluster_free(f->cl);
    ls_plan_catalog_free(f->cat);
}

static void test_planner_files(void) {
    llmpq2 f;
    llmpq2_open(&f);
    const ls_plan_arch a = f.a;
    const ls_plan_cluster *cl = f.cl;
    ls_plan_problem *pb = f.pb;
    ls_plan_result *pl = f.pl, *back = malloc(sizeof *back);
    ls_plan *file = malloc(sizeof *file);
    char path[300], vl[300];
    snprintf(path, sizeof path, "%s/planner.json", tmpdir);
    snprintf(vl, sizeof vl, "%s/vllm.sh", tmpdir);
    CHECK(ls_plan_result_write(pb, pl, path) == LS_OK);
    CHECK_MSG(ls_plan_read(path, 48, file) == LS_OK, "%s", ls_errmsg());
    CHECK_EQ_INT(file->n_stages, pl->n_stage);
    CHECK(!strcmp(file->model_name, "opt-30b"));
    for (int s = 0; s < pl->n_stage; s++) {
        CHECK_EQ_INT(file->stages[s].layer_begin, pl->begin[s]);
        CHECK_EQ_INT(file->stages[s].layer_end, pl->begin[s + 1]);
        CHECK(!strcmp(file->stages[s].device, cl->dev[pl->dev[s]].name));
    }
    for (int i = 0; i < 48; i++) CHECK_EQ_INT(file->bits[i], pl->bits[i]);
    CHECK_EQ_INT(file->mb_prefill, pl->mb_prefill);
    CHECK_EQ_INT(file->mb_decode, pl->mb_decode);
    CHECK_MSG(ls_plan_result_read(path, pb, back) == LS_OK, "%s", ls_errmsg());
    CHECK_EQ_INT(back->n_stage, pl->n_stage);
    for (int i = 0; i < 48; i++) CHECK_EQ_INT(back->bits[i], pl->bits[i]);
    for (int s = 0; s < pl->n_stage; s++) CHECK_EQ_INT(back->dev[s], pl->dev[s]);
    CHECK_NEAR(back->objective, pl->objective, 1e-12 * pl->objective);
    /* the file holds the prediction the planner printed */
    cJSON *j;
    CHECK(ls_json_read_file(path, &j) == LS_OK);
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "predicted");
    CHECK(pr && fabs(cJSON_GetObjectItemCaseSensitive(pr, "throughput_tok_s")->valuedouble - pl->throughput_tok_s) <=
                    1e-9 * pl->throughput_tok_s);
    CHECK(!cJSON_GetObjectItemCaseSensitive(j, "group")); /* the planner leaves the group to the checkpoint */
    cJSON_Delete(j);
    /* a plan for another model or cluster is refused by name */
    ls_plan_arch small = a;
    small.n_layer = 40;
    ls_plan_problem *pb2 = malloc(sizeof *pb2);
    CHECK(ls_plan_problem_init(pb2, &small, cl, (ls_plan_workload){32, 512, 100}) == LS_OK);
    CHECK(ls_plan_result_read(path, pb2, back) == LS_EFORMAT && strstr(ls_errmsg(), "48 layers"));
    snprintf(file->stages[0].device, sizeof file->stages[0].device, "H100-80G");
    CHECK(ls_plan_to_result(pb, file, "x", back) == LS_EFORMAT && strstr(ls_errmsg(), "H100-80G"));
    CHECK(ls_plan_export_vllm(pb, pl, vl) == LS_OK);
    char *txt;
    size_t n;
    CHECK(ls_file_read(vl, &txt, &n) == LS_OK);
    char want[128];
    snprintf(want, sizeof want, "--pipeline-parallel-size %d", pl->n_stage);
    CHECK(strstr(txt, want) != NULL && strstr(txt, "VLLM_PP_LAYER_PARTITION=") != NULL);
    free(txt);
    free(pb2);
    free(file);
    free(back);
    llmpq2_close(&f);
}

static void put(const char *dir, const char *name, const char *text) {
    char p[400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    CHECK(ls_file_write_atomic(p, text, strlen(text)) == LS_OK);
}

/* A catalog of one's own: the defaults of fields a GPU or model leaves out, which nodes of a
 * cluster are interchangeable, a host without hop_us, and the clusters listed in natural order. */
static void test_own_catalog(void) {
    char dir[300], cdir[320];
    snprintf(dir, sizeof dir, "%s/cat", tmpdir);
    snprintf(cdir, sizeof cdir, "%s/clusters", dir);
    CHECK(ls_mkdirs(cdir) == LS_OK);
    put(dir, "gpus.json",
        "{\"format\":\"llmsys-gpus\",\"version\":1,\"gpus\":[{\"name\":\"G\",\"memory_GB\":16,"
        "\"bandwidth_GBps\":300,\"fp16_tflops\":60}]}");
    put(dir, "models.json",
        "{\"format\":\"llmsys-models\",\"version\":1,\"models\":[{\"name\":\"m\",\"n_layer\":4,\"d_model\":64,"
        "\"n_head\":8,\"d_ff\":256,\"vocab\":1000,\"n_ctx\":128}]}");
    const char *cl_text = "{\"format\":\"llmsys-cluster\",\"version\":1,\"host\":{\"capacity\":2},\"nodes\":["
                          "{\"gpu\":\"G\",\"count\":2},{\"gpu\":\"G\",\"count\":1},{\"gpu\":\"G\",\"count\":2,"
                          "\"link_GBps\":50},{\"gpu\":\"G\",\"count\":0},{\"gpu\":\"G\",\"count\":2}]}";
    put(cdir, "c10.json", cl_text);
    put(cdir, "c2.json", cl_text);
    put(cdir, "c1.json", cl_text);
    /* a profile named relative to its cluster file's directory */
    char prof[400], src[400];
    snprintf(prof, sizeof prof, "%s/prof", cdir);
    CHECK(ls_mkdirs(prof) == LS_OK);
    snprintf(prof, sizeof prof, "%s/prof/p.json", cdir);
    snprintf(src, sizeof src, "%s/data/profiles/h200-llama-2-7b.json", LLMSYS_SOURCE_DIR);
    CHECK(ls_file_copy(src, prof, 1 << 24) == LS_OK);
    put(cdir, "cp.json",
        "{\"format\":\"llmsys-cluster\",\"version\":1,\"nodes\":[{\"profile\":\"prof/p.json\",\"memory_GB\":80,"
        "\"count\":1}]}");
    ls_plan_catalog *cat = NULL;
    CHECK_MSG(ls_plan_catalog_load(dir, &cat) == LS_OK, "%s", ls_errmsg());
    if (!cat) return;
    ls_plan_gpu g;
    ls_plan_arch a;
    CHECK(ls_plan_catalog_gpu(cat, "g", &g) == LS_OK && g.link_Bps == 12e9 && g.int8_ops == 0);
    CHECK(ls_plan_catalog_model(cat, "m", &a) == LS_OK && a.n_kv_head == 8 && !a.gated);
    ls_plan_cluster *cl = NULL;
    CHECK_MSG(ls_plan_cluster_load(cat, "c2", &cl) == LS_OK, "%s", ls_errmsg());
    if (cl) {
        /* nodes of the same GPU, link and count share a kind; a node of no devices is none */
        CHECK_EQ_INT(cl->n_dev, 7);
        CHECK_EQ_INT(cl->n_node, 4);
        CHECK(cl->node_kind[0] == 0 && cl->node_kind[1] == 1 && cl->node_kind[2] == 2 && cl->node_kind[3] == 0);
        CHECK(cl->dev[3].gpu.link_Bps == 50e9 && cl->dev[5].gpu.link_Bps == 12e9);
        CHECK(cl->host_capacity == 2 && cl->host_hop_s == -1); /* no hop_us: the link's own figure */
        ls_plan_cluster_free(cl);
    }
    cl = NULL;
    CHECK_MSG(ls_plan_cluster_load(cat, "cp", &cl) == LS_OK, "%s", ls_errmsg());
    CHECK(cl && cl->n_dev == 1 && cl->dev[0].prof == 0 && cl->n_prof == 1);
    ls_plan_cluster_free(cl);
    char **names = NULL;
    int n = 0;
    CHECK(ls_plan_catalog_clusters(cat, &names, &n) == LS_OK && n == 4);
    CHECK(n == 4 && !strcmp(names[0], "c1") && !strcmp(names[1], "c2") && !strcmp(names[2], "c10") &&
          !strcmp(names[3], "cp"));
    ls_plan_names_free(names, n);
    ls_plan_catalog_free(cat);
    CHECK(test_rmtree(dir) == 0);
}

/* The report (`plan serve --report`), the vLLM export and the printed table, field by field,
 * for a plan whose stages sit on the devices in reverse order with mixed bits per layer (the
 * planner's own plan on llmpq-2 runs the devices in order at 4 bits everywhere, where a field
 * taken from the wrong index would look right). */
static void test_report(void) {
    llmpq2 f;
    llmpq2_open(&f);
    ls_plan_problem *pb = f.pb;
    ls_plan_result *pl = f.pl;
    CHECK_EQ_INT(pl->n_stage, 4);
    static const int bits[4] = {3, 4, 8, 16};
    for (int i = 0; i < 48; i++) pl->bits[i] = (unsigned char)bits[(i / 5) % 4];
    for (int s = 0; s < 4; s++) {
        pl->dev[s] = 3 - s; /* the V100 (node 1) first */
        pl->stage_mem[s] = 1e9 * (s + 1), pl->stage_usable[s] = 1e9 * (2 * s + 5);
        pl->stage_decode_s[s] = 1e-3 * (s + 11);
    }
    pl->prefill_s = 7.5, pl->decode_s = 8.25;
    char path[300], vl[300];
    snprintf(path, sizeof path, "%s/report.json", tmpdir);
    snprintf(vl, sizeof vl, "%s/vllm.sh", tmpdir);
    CHECK_MSG(ls_plan_report_write(pb, pl, path) == LS_OK, "%s", ls_errmsg());
    cJSON *j;
    CHECK(ls_json_read_file(path, &j) == LS_OK);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "stages"),
                *dv = cJSON_GetObjectItemCaseSensitive(j, "devices");
    CHECK_EQ_INT(cJSON_GetArraySize(st), 4);
    CHECK_EQ_INT(cJSON_GetArraySize(dv), 4);
    for (int s = 0; s < 4 && cJSON_GetArraySize(st) == 4 && cJSON_GetArraySize(dv) == 4; s++) {
        const cJSON *o = cJSON_GetArrayItem(st, s), *d = cJSON_GetArrayItem(dv, s);
        CHECK_EQ_INT(cJSON_GetObjectItemCaseSensitive(o, "device_index")->valueint, 3 - s);
        CHECK_EQ_INT(cJSON_GetObjectItemCaseSensitive(o, "node")->valueint, s == 0 ? 1 : 0);
        CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(d, "device")->valuestring, s == 0 ? "V100-32G" : "T4-16G"));
        CHECK_NEAR(cJSON_GetObjectItemCaseSensitive(d, "memory_GB")->valuedouble, s + 1, 1e-12);
        CHECK_NEAR(cJSON_GetObjectItemCaseSensitive(d, "usable_GB")->valuedouble, 2 * s + 5, 1e-12);
        CHECK_NEAR(cJSON_GetObjectItemCaseSensitive(d, "headroom_GB")->valuedouble, s + 4, 1e-12);
    }
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "predicted");
    CHECK_NEAR(cJSON_GetObjectItemCaseSensitive(pr, "prefill_s")->valuedouble, 7.5, 1e-12);
    CHECK_NEAR(cJSON_GetObjectItemCaseSensitive(pr, "decode_s")->valuedouble, 8.25, 1e-12);
    CHECK(!cJSON_GetObjectItemCaseSensitive(pr, "ilp_optimal")); /* splitquant: no ILP fields */
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "vllm");
    char part[64];
    snprintf(part, sizeof part, "%d,%d,%d,%d", pl->begin[1], pl->begin[2] - pl->begin[1], pl->begin[3] - pl->begin[2],
             48 - pl->begin[3]);
    CHECK_MSG(!strcmp(cJSON_GetObjectItemCaseSensitive(v, "VLLM_PP_LAYER_PARTITION")->valuestring, part),
              "partition %s, want %s", cJSON_GetObjectItemCaseSensitive(v, "VLLM_PP_LAYER_PARTITION")->valuestring,
              part);
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(v, "layer_bits");
    CHECK_EQ_INT(cJSON_GetArraySize(lb), 48);
    for (int i = 0; i < 48 && cJSON_GetArraySize(lb) == 48; i++)
        CHECK_EQ_INT(cJSON_GetArrayItem(lb, i)->valueint, bits[(i / 5) % 4]);
    cJSON_Delete(j);
    /* the export names each layer's bits, stage and device */
    CHECK(ls_plan_export_vllm(pb, pl, vl) == LS_OK);
    char *txt;
    size_t n;
    CHECK(ls_file_read(vl, &txt, &n) == LS_OK);
    char want[160];
    snprintf(want, sizeof want, "export VLLM_PP_LAYER_PARTITION=%s\n", part);
    CHECK(strstr(txt, want) != NULL);
    for (int s = 0; s < 4; s++)
        for (int i = pl->begin[s]; i < pl->begin[s + 1]; i++) {
            snprintf(want, sizeof want, "#   layer %d: %d bits, stage %d (%s)\n", i, bits[(i / 5) % 4], s,
                     s == 0 ? "V100-32G" : "T4-16G");
            CHECK_MSG(strstr(txt, want) != NULL, "export lacks '%s'", want);
        }
    free(txt);
    /* the printed table: each stage's device, layers, bits per width, memory, free memory, decode ms */
    char *buf = NULL;
    size_t blen = 0;
    FILE *mf = open_memstream(&buf, &blen);
    CHECK(mf != NULL);
    if (mf) {
        ls_plan_print(mf, pb, pl);
        fclose(mf);
        for (int s = 0; s < 4; s++) {
            int cnt[4] = {0};
            for (int i = pl->begin[s]; i < pl->begin[s + 1]; i++) cnt[(i / 5) % 4]++;
            char lay[24], bw[32];
            snprintf(lay, sizeof lay, "%d-%d", pl->begin[s], pl->begin[s + 1] - 1);
            snprintf(bw, sizeof bw, "%d/%d/%d/%d", cnt[0], cnt[1], cnt[2], cnt[3]);
            snprintf(want, sizeof want, "  %-5d %-12s %-9s %-15s %9.3f %9.3f %9.2f\n", s,
                     s == 0 ? "V100-32G" : "T4-16G", lay, bw, (double)(s + 1), (double)(s + 4), 11.0 + s);
            CHECK_MSG(strstr(buf, want) != NULL, "table lacks '%s':\n%s", want, buf);
        }
        free(buf);
    }
    /* an ILP plan says whether it was proven optimal, and its gap */
    pb->time_limit_s = 2;
    CHECK(ls_plan_solve(pb, LS_PLAN_ALGO_ILP, pl) == LS_OK);
    cJSON *ji = ls_plan_to_json(pb, pl, 1);
    const cJSON *pi = cJSON_GetObjectItemCaseSensitive(ji, "predicted");
    CHECK(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(pi, "ilp_optimal")) &&
          cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pi, "ilp_optimal")) == pl->ilp_optimal);
    CHECK_NEAR(cJSON_GetObjectItemCaseSensitive(pi, "ilp_gap")->valuedouble, pl->ilp_gap, 1e-12);
    pl->ilp_optimal = !pl->ilp_optimal; /* the other answer is written as it is */
    cJSON_Delete(ji);
    ji = ls_plan_to_json(pb, pl, 1);
    pi = cJSON_GetObjectItemCaseSensitive(ji, "predicted");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pi, "ilp_optimal")) == pl->ilp_optimal);
    cJSON_Delete(ji);
    unlink(path);
    llmpq2_close(&f);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/llmsys-plan-file-test-%d", (int)getpid());
    LS_ASSERT(ls_mkdirs(tmpdir) == LS_OK);
    RUN(test_good);
    RUN(test_bad);
    RUN(test_planner_files);
    RUN(test_own_catalog);
    RUN(test_report);
    static const char *const made[] = {"plan.json", "planner.json", "vllm.sh"};
    for (int i = 0; i < 3; i++) {
        char f[300];
        snprintf(f, sizeof f, "%s/%s", tmpdir, made[i]);
        unlink(f);
    }
    CHECK_MSG(rmdir(tmpdir) == 0, "%s: left files behind", tmpdir);
    return TEST_RESULT();
}
