package jetstream

import (
	"crypto/sha256"
	"encoding/hex"
)

// DefaultStream is the default deployment's events stream (nats.stream's
// default).
const DefaultStream = "HOOKGATE_EVENTS"

// Scoped is name as the deployment whose events stream is stream has it,
// so that deployments on one NATS (each its own nats.stream) share no
// bucket, stream or subject: name itself for the default stream (what
// every deployment used before), else name, "_" and the stream's name, or
// the first 16 hex digits of its SHA-256 if the name has characters other
// than letters, digits, '_' and '-' (which neither a bucket's name nor a
// subject's token may have).
func Scoped(name, stream string) string {
	if stream == "" || stream == DefaultStream {
		return name
	}
	for _, r := range stream {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			sum := sha256.Sum256([]byte(stream))
			return name + "_" + hex.EncodeToString(sum[:8])
		}
	}
	return name + "_" + stream
}

// subjects are the first tokens of a deployment's subjects.
type subjects struct {
	events string // SubjectPrefix, scoped
	tasks  string // TaskSubjectPrefix, scoped
}

func subjectsOf(stream string) subjects {
	return subjects{events: Scoped(SubjectPrefix, stream), tasks: Scoped(TaskSubjectPrefix, stream)}
}

// SourceFilter is the filter subject of source's events in the events
// stream stream: webhooks.<source>.> for the default stream.
func SourceFilter(stream, source string) string {
	return Scoped(SubjectPrefix, stream) + "." + source + ".>"
}

// TaskFilter is the filter subject of the tasks in the events stream
// stream: tasks.> for the default stream.
func TaskFilter(stream string) string {
	return Scoped(TaskSubjectPrefix, stream) + ".>"
}
