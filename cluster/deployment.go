package cluster

import "github.com/hookgate/hookgate/jetstream"

// Names are what one deployment's gateways share on NATS beside its events
// stream: its buckets and its records stream.
type Names struct {
	Claims     string // KV bucket of the claims (Config.Bucket)
	Deliveries string // KV bucket of the delivery state (DeliveryStateConfig.Bucket)
	Pauses     string // KV bucket of the pauses (PausesConfig.Bucket)
	Stats      string // KV bucket of the console's samples (StatsConfig.Bucket)
	Takes      string // KV bucket of what each gateway's routes take (TakesConfig.Bucket)
	Records    string // the records stream (RecordsConfig.Stream)
	// RecordsSubject is the first tokens of the records stream's subjects
	// (RecordsConfig.Subject).
	RecordsSubject string
}

// Deployment returns the names of the deployment whose events stream is
// stream (nats.stream), each default name jetstream.Scoped: the default
// stream's deployment keeps HOOKGATE_CLAIMS and the others; another has
// HOOKGATE_CLAIMS_<stream> and so on, and records subjects
// hookgate.records_<stream>.>, so that deployments on one NATS share none
// (two streams cannot share subjects).
func Deployment(stream string) Names {
	return Names{
		Claims:         jetstream.Scoped(DefaultClaimsBucket, stream),
		Deliveries:     jetstream.Scoped(DefaultBucket, stream),
		Pauses:         jetstream.Scoped(DefaultPausesBucket, stream),
		Stats:          jetstream.Scoped(DefaultStatsBucket, stream),
		Takes:          jetstream.Scoped(DefaultTakesBucket, stream),
		Records:        jetstream.Scoped(DefaultRecordsStream, stream),
		RecordsSubject: recordsPrefix + "." + jetstream.Scoped(recordsToken, stream),
	}
}
