package outbound

import (
	"encoding/json"
	"net/http"

	"github.com/hookgate/hookgate/jetstream"
	"github.com/hookgate/hookgate/store"
)

// TaskRoute is the name tasks are delivered under (in deliveries, metrics
// and Idempotency-Keys). Route names from the configuration cannot start
// with '_'.
const TaskRoute = "_tasks"

// newTaskRoute is the route of task deliveries: each task names its own
// URL; transport enforces the egress policy at dial time. Its consumer is
// on the events stream stream.
func newTaskRoute(tc Tasks, stream string, transport http.RoundTripper) (*route, error) {
	r, err := newRoute(tc.route(), stream, transport)
	if err != nil {
		return nil, err
	}
	r.consumer = "tasks"
	r.subjects = []string{jetstream.TaskFilter(stream)}
	r.scopes, r.queued = newScopeSlots(tc.perToken()), newScopeSlots(tc.perToken())
	return r, nil
}

// taskEnvelope turns a task event's body (a store.TaskRequest) into what a
// round sends. ok is false for a body that is not a task request.
func taskEnvelope(seq int64, id string, body []byte) (envelope, bool) {
	var tr store.TaskRequest
	if err := json.Unmarshal(body, &tr); err != nil || tr.URL == "" {
		return envelope{}, false
	}
	return envelope{
		seq: seq, source: store.TaskSource, id: id, typ: "task",
		contentType: tr.ContentType, body: tr.Body,
		url: tr.URL, method: tr.Method, headers: tr.Headers, idempotencyKey: tr.IdempotencyKey,
	}, true
}
