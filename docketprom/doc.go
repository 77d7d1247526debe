// Package docketprom exports a docket.Client's metrics to Prometheus: the
// ones the worker command serves (docs/METRICS.md), and the HTTP handler of
// /metrics, /healthz and /readyz it serves them with. It is a package of
// its own so that a program embedding docket without Prometheus does not
// import it.
//
// A program serves them as the worker command does:
//
//	col, err := docketprom.NewCollector(client, nil) // before client.Start
//	...
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(col)
//	health := docketprom.NewHealth(func(ctx context.Context) error { return mc.Ping(ctx, nil) }, 0)
//	srv, err := docketprom.Serve("127.0.0.1:9101", docketprom.Handler(reg, health), logger)
//	...
//	defer srv.Shutdown(context.Background())
//	if err := client.Start(ctx); err != nil { ... }
//	health.SetUp()        // /readyz answers 200 from now on, while the ping succeeds
//	...
//	health.ShuttingDown() // /readyz answers 503 from now on
//	err = client.Stop(ctx)
package docketprom
