package otelsync_test

import (
	"context"
	"fmt"
	"log"
	"sort"
	"strings"

	"github.com/latchkey/latchkey/internal/embedredis"
	"github.com/latchkey/latchkey/otelsync"
	dsync "github.com/latchkey/latchkey/sync"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Latchkey's figures exported to Prometheus: the OpenTelemetry Prometheus exporter reads
// the Observer's metrics into a registry, which a service serves on /metrics
// (promhttp.HandlerFor(reg, promhttp.HandlerOpts{})). Here the registry is read directly.
func Example_prometheus() {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		log.Fatal(err)
	}
	obs, err := otelsync.NewObserver(otelsync.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))))
	if err != nil {
		log.Fatal(err)
	}

	srv, err := embedredis.Start() // an embedded Redis, for the example
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	defer rdb.Close()
	// Names are classed by their prefix: "orders:42" and "orders:43" are both "orders".
	classify := func(name string) string { class, _, _ := strings.Cut(name, ":"); return class }
	c, err := dsync.New(rdb, dsync.WithObserver(obs, classify))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	for _, name := range []string{"orders:42", "orders:43"} {
		l := c.Lock(name)
		if err := l.Lock(ctx); err != nil {
			log.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			log.Fatal(err)
		}
	}

	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	var lines []string
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "latchkey_") || f.GetType().String() != "COUNTER" {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				if strings.HasPrefix(l.GetName(), "latchkey_") {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
			}
			lines = append(lines, fmt.Sprintf("%s{%s} %v", f.GetName(), strings.Join(labels, ","), m.GetCounter().GetValue()))
		}
	}
	sort.Strings(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// latchkey_acquisitions_total{latchkey_class=orders,latchkey_kind=lock,latchkey_outcome=taken} 2
	// latchkey_releases_total{latchkey_class=orders,latchkey_handoff=false,latchkey_kind=lock,latchkey_outcome=released} 2
}
