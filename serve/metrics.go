package serve

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the server's Prometheus metrics, in a registry of its own.
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	started      prometheus.Counter
	builds       *prometheus.CounterVec
	running      prometheus.Gauge
	cacheHits    prometheus.Counter
	bytes        prometheus.Counter
	buildSeconds prometheus.Histogram
	httpSeconds  *prometheus.HistogramVec
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stamp_serve_build_requests_total",
			Help: "POST /v1/builds answered, by outcome: queued (a new build), joined (one in flight), cached (done and in the cache), rejected (429)."},
			[]string{"outcome"}),
		started: prometheus.NewCounter(prometheus.CounterOpts{Name: "stamp_serve_builds_started_total",
			Help: "Builds started (a build interrupted by a restart starts again)."}),
		builds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stamp_serve_builds_total",
			Help: "Builds finished, by result."}, []string{"result"}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{Name: "stamp_serve_builds_running",
			Help: "Builds running now."}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{Name: "stamp_serve_cache_hits_total",
			Help: "Requests answered from the cache, and builds the cache held whole (no phase ran)."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "stamp_serve_bytes_served_total",
			Help: "Bytes of image files sent."}),
		buildSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "stamp_serve_build_duration_seconds",
			Help: "How long builds took.", Buckets: prometheus.ExponentialBuckets(0.25, 2, 14)}),
		httpSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "stamp_serve_http_request_duration_seconds",
			Help: "How long requests took to answer, by route.", Buckets: prometheus.DefBuckets}, []string{"route"}),
	}
	queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stamp_serve_queue_length",
		Help: "Builds waiting for a place to run."}, func() float64 { return float64(len(s.queue)) })
	m.reg.MustRegister(m.requests, m.started, m.builds, m.running, m.cacheHits, m.bytes, m.buildSeconds, m.httpSeconds, queued,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
