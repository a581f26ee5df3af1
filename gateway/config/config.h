/*
 * config.h -- the gateway configuration: one JSON file, validated completely at start-up.
 * docs/configuration.md is the reference for every key.
 */
#ifndef SG_GATEWAY_CONFIG_H
#define SG_GATEWAY_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include "redis_conf.h"

/** A spend budget (gateway/policy/budget.c): backend calls allowed per calendar period (UTC). */
typedef struct st_sg_budget_conf_t {
    int enabled;      /* 0: no budget */
    uint64_t queries; /* backend queries allowed per period */
    int period;       /* SG_PERIOD_* */
    int fail;         /* SG_BUDGET_FAIL_*: when Redis is configured but does not answer */
} sg_budget_conf_t;

enum { SG_FLOOR_NONE = 0, SG_FLOOR_P50 = 1, SG_FLOOR_P90 = 2 };
enum { SG_PERIOD_HOUR = 0, SG_PERIOD_DAY = 1, SG_PERIOD_WEEK = 2, SG_PERIOD_MONTH = 3 };
enum { SG_BUDGET_FAIL_CLOSED = 0, SG_BUDGET_FAIL_OPEN = 1 };

typedef struct st_sg_backend_conf_t {
    char *name;        /* route name: POST /retrieve/<name> */
    char *plugin;      /* as written in the config */
    char *plugin_path; /* resolved path of the .so */
    char *config_json; /* the backend's "config" object, serialised ("{}" when absent) */
    uint32_t topk;     /* default topk for this route */
    uint32_t timeout_ms;
    uint32_t max_inflight;      /* queries handed to the plugin at once; 0 = unlimited */
    uint32_t max_queue;         /* queries waiting for admission; beyond that 503 */
    uint32_t chunk;             /* a request's queries reach the plugin in calls of at most this many */
    double qps;                 /* queries started per second on this route (token bucket); 0 = unlimited */
    double burst;               /* depth of that bucket, in queries */
    int32_t retries;            /* retries per upstream request the route allows; -1 = the plugin's own setting */
    uint32_t min_remaining_ms;  /* a call is not started with less of its deadline left (504 at once) */
    int min_remaining_quantile; /* SG_FLOOR_*: the floor is at least this quantile of recent call durations */
    int cache;                  /* result cache on/off for this route */
    uint32_t cache_ttl_s;
    int fallback;                       /* index of the fallback backend, -1 = none */
    struct st_sg_rerank_conf_t *rerank; /* the route's rerank stage (rerank.h), or NULL */
    char *rerank_json;                  /* its "rerank" object, serialised, or NULL: a reload keeps the route's
                                         * plugin instance only when this and config_json are unchanged (gen.c) */

    /* spend budgets (budget.c): calls on a metered route count against client budgets (a route
     * budget meters its route); the route's own budget counts every client's calls */
    int metered;
    sg_budget_conf_t budget;
    struct st_sg_trace_conf_t *trace; /* the route's query trace (trace.h), or NULL; owned by the config's traces */
} sg_backend_conf_t;

typedef struct st_sg_client_conf_t {
    char *id;
    char *key;             /* the API key, read from the environment; NULL for the default entry */
    double rate;           /* queries per second; 0 = unlimited */
    double burst;          /* queries */
    int mode;              /* SG_RL_QUEUE or SG_RL_REJECT */
    uint32_t max_wait_ms;  /* queue mode: longest wait before 503 */
    int reject_status;     /* 429 or 503: the status of a reject-mode rate refusal and of an exhausted budget */
    uint32_t max_inflight; /* queries in flight at once for this client; 0 = unlimited */
    uint32_t weight;       /* share of a saturated backend relative to other clients */
    int global;            /* the rate limit is shared by every replica through Redis (else a 1/global_replicas share) */

    /* backend calls on metered routes (budget.c); in clients.default: one budget that the
     * anonymous clients share, and the default of keyed ones */
    sg_budget_conf_t budget;
    /* the client's query trace (trace.h), or NULL; owned by the config's traces. Keyed clients
     * without "trace" share clients.default's */
    struct st_sg_trace_conf_t *trace;
} sg_client_conf_t;

enum { SG_RL_QUEUE = 0, SG_RL_REJECT = 1 };

/* The settings only a restart changes (a reload keeps the running ones and says so): their config
 * paths, in sg_config_t.restart_json order. */
#define SG_CONFIG_N_RESTART 6
extern const char *const sg_config_restart_keys[SG_CONFIG_N_RESTART];

/**
 * One listening socket: a TCP address or a Unix domain socket, and who may talk to it how (gate.c)
 * (docs/configuration.md, "listen"). The object form of `listen` with both `port` and `unix` makes
 * two of these, with the same policy.
 */
typedef struct st_sg_listen_conf_t {
    char *host;           /* TCP: an address or a host name; NULL for a Unix domain socket */
    uint16_t port;        /* TCP: 0 = any free port */
    char *unix_path;      /* the Unix domain socket's path; NULL for TCP */
    uint32_t unix_mode;   /* permission bits of the socket file */
    char *address_file;   /* TCP: "host:port" is written here once the gateway serves; NULL = none */
    char **allowed_hosts; /* lower case: names, "*.suffix", "*" */
    size_t n_allowed_hosts;
    char **allowed_origins; /* lower case: "scheme://host[:port]", "null", "*" */
    size_t n_allowed_origins;
    int h2c;        /* HTTP/2 without TLS (prior knowledge, Upgrade: h2c) on this listener */
    char where[32]; /* "listen" or "listen[1]", for messages */
} sg_listen_conf_t;

#define SG_LISTEN_MAX 16
enum { SG_MCP_TEXT_SEARCH_R1 = 0, SG_MCP_TEXT_RESULTS_JSON = 1 };

typedef struct st_sg_config_t {
    char *path;               /* the config file */
    char *base_dir;           /* its directory: relative paths are resolved against it */
    sg_listen_conf_t *listen; /* the sockets to serve on, at least one */
    size_t n_listen;
    /* what every listener shares: the settings of the loops' h2o contexts (any entry may set them;
     * the entries that do must agree) */
    struct {
        int any_h2c;               /* some listener serves HTTP/2 without TLS: the loops get an HTTP/2 context */
        size_t h2c_max_body_bytes; /* h2o's limit for one HTTP/2 request body (100 per connection) */
        uint32_t read_timeout_ms;  /* to read a request, head and body; also the keep-alive idle time */
    } listen_common;
    int threads;
    int log_level;
    uint32_t shutdown_drain_ms; /* how long a stopping gateway reports draining on /health before it stops accepting */
    uint32_t shutdown_grace_ms; /* how long a stopping gateway keeps serving the requests it has */
    char *plugin_dir;
    struct {
        size_t max_body_bytes;
        uint32_t max_queries;
        uint32_t max_query_bytes;
        uint32_t max_topk;
        uint32_t max_deadline_ms;
        uint64_t max_response_bytes;          /* body of one /retrieve or /access answer (413 beyond) */
        uint64_t max_response_bytes_inflight; /* response memory held by the whole process (503 beyond) */
        uint32_t response_wait_ms;            /* longest wait for room in that budget before 503 */
        uint32_t write_timeout_ms;            /* a reader that takes no bytes this long is disconnected */
        uint32_t min_write_bytes_per_s;       /* an answer's reader slower than this on average (after the grace) too; 0 = off */
    } limits;
    sg_backend_conf_t *backends; /* plugin routes */
    size_t n_backends;
    struct st_sg_fusion_conf_t *fusions; /* fusion routes (fusion.h): entries of backends[] with "fusion" */
    size_t n_fusions;
    int default_backend;
    /* clients: identity, quotas and fairness */
    struct {
        int require_key;
        int trust_client_id_header;
        sg_client_conf_t defaults; /* id is NULL */
        sg_client_conf_t *keyed;
        size_t n_keyed;
        size_t max_tracked; /* distinct anonymous client ids kept (LRU) */
        char *admin_key;    /* guards /, /metrics, /stats (read from admin_key_env); NULL = none */
        /* the replicas sharing the global rate limits: while Redis cannot decide, each enforces
         * 1/global_replicas of every global client's rate and burst on its own */
        uint32_t global_replicas;
    } clients;
    /* result cache */
    struct {
        size_t l1_bytes;       /* 0 = L1 off */
        sg_redis_conf_t redis; /* cache.redis; redis.enabled = 0: Redis off */
        char *redis_prefix;
        uint32_t default_ttl_s;
        double global_rate; /* queries/s shared by all replicas through Redis; 0 = off */
        double global_burst;
    } cache;
    /* the MCP endpoint (mcp.c, docs/mcp.md) */
    struct {
        int enabled;
        uint32_t max_sessions;    /* open sessions of both transports; least recently used out first */
        uint32_t session_idle_s;  /* a session unused this long ends */
        uint32_t sse_keepalive_s; /* comment lines on idle GET /sse streams */
        int require_session;      /* POST /mcp other than initialize needs Mcp-Session-Id */
        int text_format;          /* SG_MCP_TEXT_SEARCH_R1 or SG_MCP_TEXT_RESULTS_JSON */
    } mcp;
    /* every "trace" object of routes and clients (trace.h); the confs point into this list */
    struct st_sg_trace_conf_t **traces;
    size_t n_traces;
    /* the settings of sg_config_restart_keys as the file wrote them (canonical JSON; "null" when
     * absent): a reload compares them with the running config's */
    char *restart_json[SG_CONFIG_N_RESTART];
} sg_config_t;

/** Reads and validates `path`. On failure returns -1 with a message naming the key and value in `err`. */
int sg_config_load(sg_config_t *cfg, const char *path, char *err, size_t err_size);
/** Same, from a string (for tests); `base_dir` resolves relative paths. */
int sg_config_parse(sg_config_t *cfg, const char *json, size_t len, const char *base_dir, char *err, size_t err_size);
void sg_config_free(sg_config_t *cfg);
/**
 * Internal (config.c, config_fusion.c): reads `o`'s "trace" into `*out` (NULL when absent or null) and
 * keeps it in cfg->traces. `name` names the file when the path is a directory.
 */
struct st_sg_cfg_t;
struct cJSON;
int sg__config_trace(sg_config_t *cfg, struct st_sg_cfg_t *c, const struct cJSON *o, const char *name,
                     struct st_sg_trace_conf_t **out);
/**
 * The first TCP listener, for the command line's --host, --port and --address-file; when the
 * config has none (only a Unix domain socket), appends one on 127.0.0.1:8000 (with the default
 * policy: no allowed hosts or origins, h2c unless keys are required).
 */
sg_listen_conf_t *sg_config_tcp_listener(sg_config_t *cfg);
/** Index of the backend called `name` (length `len`), or -1. */
int sg_config_find_backend(const sg_config_t *cfg, const char *name, size_t len);

#endif
