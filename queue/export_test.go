package queue

// WithRaceBeforeStamp returns a Client like c whose batch claims run f
// after reading their candidates and before stamping them, as if another
// worker ran in between.
func WithRaceBeforeStamp(c *Client, f func()) *Client {
	r := *c
	r.betweenReadAndStamp = f
	return &r
}
