/*
 * fetch.c: a training process as a user of the installed C SDK writes it,
 * built by the install test with nothing but
 *   cc fetch.c $(pkg-config --cflags --libs tuned-client tuned-exec)
 * against the installed prefix: it fetches the best plan of a graph from
 * the daemon, runs it on its own tensors and checks y = relu(x w + b).
 *
 *   fetch SOCKET KEY GRAPH.json   (exit 0: the plan ran and was right)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <tuned_client.h>
#include <tuned_exec.h>

enum { M = 5, K = 7, N = 3 };

static char *read_text(const char *path)
{
	FILE *f = fopen(path, "r");
	char *text = calloc(1, 1 << 16);

	if (!f || !text || fread(text, 1, (1 << 16) - 1, f) == 0) {
		fprintf(stderr, "fetch: cannot read %s\n", path);
		exit(1);
	}
	fclose(f);
	return text;
}

/* The fetch reply of "key" as JSON text, from the daemon at "socket". */
static char *fetch_plan(const char *socket, const char *key)
{
	tuned_client *client;
	tuned_client_error err;
	json_t *fetched;
	char *text;

	if (tuned_client_connect(socket, NULL, &client, &err) < 0 ||
	    tuned_client_fetch(client, key, 1, 0, &fetched, &err) < 0) {
		fprintf(stderr, "fetch: %s (%s)\n", err.message,
			tuned_client_code_name(err.code));
		exit(1);
	}
	printf("fetched version %lld, %.4f ms, from %s\n",
	       (long long)json_integer_value(json_object_get(fetched, "version")),
	       json_real_value(json_object_get(fetched, "median_ms")),
	       tuned_client_server(client));
	text = json_dumps(fetched, JSON_COMPACT);
	json_decref(fetched);
	tuned_client_close(client);
	return text;
}

int main(int argc, char **argv)
{
	static float x[M * K], w[K * N], b[N], y[M * N];
	void *tensors[] = {x, w, b, NULL, y};
	char why[512], *graph, *fetched;
	tuned_exec *plan;
	int wrong = 0;

	if (argc != 4) {
		fprintf(stderr, "usage: fetch SOCKET KEY GRAPH.json\n");
		return 2;
	}
	graph = read_text(argv[3]);
	fetched = fetch_plan(argv[1], argv[2]);
	for (int i = 0; i < M * K; i++)
		x[i] = (float)(i % 5) - 2.0f;
	for (int i = 0; i < K * N; i++)
		w[i] = (float)(i % 3) * 0.5f - 0.25f;
	for (int j = 0; j < N; j++)
		b[j] = (float)j - 1.0f;
	if (tuned_exec_load(graph, fetched, "cpu", &plan, why, sizeof(why)) < 0 ||
	    tuned_exec_run(plan, NULL, tensors, why, sizeof(why)) < 0) {
		fprintf(stderr, "fetch: %s\n", why);
		return 1;
	}
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			float h = b[j];

			for (int k = 0; k < K; k++)
				h += x[i * K + k] * w[k * N + j];
			wrong += fabsf(y[i * N + j] - fmaxf(h, 0.0f)) > 1e-4f;
		}
	tuned_exec_free(plan);
	free(graph);
	free(fetched);
	printf("%s\n", wrong ? "wrong results" : "ran, results right");
	return wrong ? 1 : 0;
}
