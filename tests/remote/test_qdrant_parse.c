/*
 * test_qdrant_parse.c -- unit tests of the Qdrant request builder and reply parsers
 * (backends/qdrant/qdrant_parse.c), with bodies shaped as Qdrant's OpenAPI document describes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "qdrant_parse.h"

static void test_build_batch(void **state)
{
    (void)state;
    float v[6] = {0.1f, -0.25f, 1.0f / 3.0f, 0.0f, 1e-20f, -1.0f};
    sg_buf_t b = {0};
    sg_qdrant_build_batch(&b, v, 2, 3, 5, NULL);
    cJSON *o = cJSON_Parse(b.base);
    assert_non_null(o);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "searches");
    assert_int_equal(cJSON_GetArraySize(s), 2);
    const cJSON *q0 = cJSON_GetArrayItem(s, 0);
    const cJSON *vec = cJSON_GetObjectItemCaseSensitive(q0, "query");
    assert_int_equal(cJSON_GetArraySize(vec), 3);
    for (int k = 0; k < 3; ++k)
        assert_true((float)cJSON_GetArrayItem(vec, k)->valuedouble == v[k]); /* exact float round trip */
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(q0, "limit")->valueint, 5);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(q0, "with_payload")));
    assert_null(cJSON_GetObjectItemCaseSensitive(q0, "params"));
    assert_true((float)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(s, 1), "query"), 1)->valuedouble ==
                1e-20f);
    cJSON_Delete(o);
    b.len = 0;
    sg_qdrant_params_t p = {.has_hnsw_ef = 1,
                            .hnsw_ef = 128,
                            .has_exact = 1,
                            .exact = 0,
                            .has_score_threshold = 1,
                            .score_threshold = 0.5,
                            .using_vector = "dense"};
    sg_qdrant_build_batch(&b, v, 1, 3, 3, &p);
    assert_non_null(strstr(b.base, "\"params\":{\"hnsw_ef\":128,\"exact\":false}"));
    assert_non_null(strstr(b.base, "\"score_threshold\":0.5"));
    assert_non_null(strstr(b.base, "\"using\":\"dense\""));
    o = cJSON_Parse(b.base);
    assert_non_null(o);
    cJSON_Delete(o);
    sg_buf_free(&b);
}

static void test_parse_batch(void **state)
{
    (void)state;
    const char *body =
        "{\"result\":[{\"points\":[{\"id\":12,\"version\":3,\"score\":0.91,\"payload\":{\"id\":\"12\",\"contents\":"
        "\"\\\"Hamlet\\\"\\nx\",\"url\":\"https://w/H\"}},{\"id\":3,\"version\":1,\"score\":0.5,\"payload\":{"
        "\"contents\":\"y\"}},{\"id\":4,\"version\":1,\"score\":0.4}]},"
        "{\"points\":[{\"id\":\"5c56c793-69f3-4fbf-87e6-c4bf54c28c26\",\"version\":0,\"score\":0.7,\"payload\":null},"
        "{\"id\":9,\"version\":0,\"score\":0.6,\"payload\":{\"url\":null,\"contents\":5,\"title\":\"T\"}}]}],"
        "\"status\":\"ok\",\"time\":0.002}";
    sg_qd_list_t l[2];
    char err[200];
    assert_int_equal(sg_qdrant_parse_batch(body, strlen(body), 2, 2, l, err, sizeof(err)), 0);
    assert_int_equal(l[0].n, 2); /* topk */
    assert_string_equal(l[0].docs[0].json, "{\"id\":\"12\",\"contents\":\"\\\"Hamlet\\\"\\nx\",\"url\":\"https://w/H\"}");
    assert_true(l[0].docs[0].score == 0.91);
    assert_string_equal(l[0].docs[1].json, "{\"contents\":\"y\",\"id\":\"3\",\"url\":\"\"}");
    assert_int_equal(l[1].n, 2);
    assert_string_equal(l[1].docs[0].json, "{\"id\":\"5c56c793-69f3-4fbf-87e6-c4bf54c28c26\",\"contents\":\"\",\"url\":\"\"}");
    assert_string_equal(l[1].docs[1].json, "{\"title\":\"T\",\"id\":\"9\",\"contents\":\"\",\"url\":\"\"}");
    sg_qdrant_lists_free(l, 2);
}

static void test_parse_batch_errors(void **state)
{
    (void)state;
    sg_qd_list_t l[2];
    char err[200];
    static const char *const bad[] = {"",
                                      "{\"status\":{\"error\":\"x\"},\"result\":null}",
                                      "{\"result\":[{\"points\":[]}]}",                           /* 1 result for 2 queries */
                                      "{\"result\":[[],[]]}",                                     /* legacy search shape */
                                      "{\"result\":[{\"points\":[{\"id\":1}]},{\"points\":[]}]}", /* no score */
                                      "{\"result\":[{\"points\":[{\"id\":-1,\"score\":1}]},{\"points\":[]}]}",
                                      "{\"result\":[{\"points\":[{\"id\":1,\"score\":1,\"payload\":[1]}]},{\"points\":[]}]}",
                                      NULL};
    for (size_t i = 0; bad[i] != NULL; ++i) {
        assert_int_equal(sg_qdrant_parse_batch(bad[i], strlen(bad[i]), 2, 3, l, err, sizeof(err)), -1);
        assert_true(err[0] != '\0');
        sg_qdrant_lists_free(l, 2);
    }
}

static void test_errors_and_collection(void **state)
{
    (void)state;
    char out[256];
    const char *e = "{\"status\":{\"error\":\"Wrong input: Vector dimension error: expected dim: 64, got 3\"},\"time\":0.0,"
                    "\"result\":null}";
    sg_qdrant_error_message(e, strlen(e), out, sizeof(out));
    assert_string_equal(out, "Wrong input: Vector dimension error: expected dim: 64, got 3");
    const char *plain = "Invalid API key or JWT";
    sg_qdrant_error_message(plain, strlen(plain), out, sizeof(out));
    assert_string_equal(out, plain);

    sg_qdrant_collection_t c;
    char err[200];
    const char *info = "{\"result\":{\"status\":\"green\",\"points_count\":1000,\"config\":{\"params\":{\"vectors\":{\"size\":64,"
                       "\"distance\":\"Cosine\"}}}},\"status\":\"ok\",\"time\":0}";
    assert_int_equal(sg_qdrant_parse_collection(info, strlen(info), NULL, &c, err, sizeof(err)), 0);
    assert_int_equal(c.size, 64);
    assert_string_equal(c.distance, "Cosine");
    assert_string_equal(c.status, "green");
    assert_int_equal(c.points, 1000);
    assert_int_equal(sg_qdrant_parse_collection(info, strlen(info), "dense", &c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "dense"));
    const char *named = "{\"result\":{\"status\":\"yellow\",\"config\":{\"params\":{\"vectors\":{\"dense\":{\"size\":768,"
                        "\"distance\":\"Dot\"}}}}}}";
    assert_int_equal(sg_qdrant_parse_collection(named, strlen(named), "dense", &c, err, sizeof(err)), 0);
    assert_int_equal(c.size, 768);
    assert_int_equal(sg_qdrant_parse_collection(named, strlen(named), NULL, &c, err, sizeof(err)), -1);
    assert_int_equal(sg_qdrant_parse_collection("nope", 4, NULL, &c, err, sizeof(err)), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build_batch),
        cmocka_unit_test(test_parse_batch),
        cmocka_unit_test(test_parse_batch_errors),
        cmocka_unit_test(test_errors_and_collection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
