package queue

// WithRaceBeforeStamp returns a Client like c whose batch claims run f
// after reading their candidates and before stamping them, as if another
// worker ran in between.
func WithRaceBeforeStamp(c *Client, f func()) *Client {
	r := *c
	r.betweenReadAndStamp = f
	return &r
}

// HeartbeatProjection says what c's heartbeats found out about the
// server: "unknown" before the first, then "projects" or "whole document".
func HeartbeatProjection(c *Client) string {
	switch c.projection.Load() {
	case projectionSupported:
		return "projects"
	case projectionUnsupported:
		return "whole document"
	}
	return "unknown"
}

// WithLostStampReply returns a Client like c whose batch claims stamp their
// jobs and then fail with err, as if the server applied the stamp and its
// reply was lost.
func WithLostStampReply(c *Client, err error) *Client {
	r := *c
	r.afterStamp = func() error { return err }
	return &r
}
