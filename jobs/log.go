package jobs

import "go.uber.org/zap"

// LogFields are the fields that identify j in every log line about it.
func (j *Job) LogFields(extra ...zap.Field) []zap.Field {
	return append([]zap.Field{
		zap.String("job_id", j.ID),
		zap.String("kind", j.Kind),
		zap.Int("attempt", j.Attempt),
		zap.String("queue", j.Queue),
	}, extra...)
}
