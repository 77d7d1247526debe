package docket

// Subscribe returns a channel of the events of kinds (all kinds when none
// is given) for the attempts this client's pool ends, and a function that
// ends the subscription and closes the channel. It may be called before
// or after Start. Sending never blocks the worker: when the reader falls
// DefaultEventBuffer events behind, further events are dropped, counted
// (EventsDropped) and logged.
func (c *Client) Subscribe(kinds ...EventKind) (<-chan *Event, func()) {
	return c.SubscribeConfig(SubscribeConfig{Kinds: kinds})
}

// SubscribeConfig is Subscribe with a buffer of cfg.Buffer events.
func (c *Client) SubscribeConfig(cfg SubscribeConfig) (<-chan *Event, func()) {
	return c.events.subscribe(cfg)
}

// EventsDropped returns how many events were dropped, over all
// subscriptions, because a subscriber's buffer was full.
func (c *Client) EventsDropped() uint64 { return c.events.dropped.Load() }
