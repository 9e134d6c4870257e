package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpudra/gpudra/sharing"
)

// Sharing strategies serve can allow (--sharing-strategies); exclusive use is always allowed.
const (
	strategyTimeSlicing = "TimeSlicing"
	strategyMPS         = "MPS"
)

// parseStrategies reads --sharing-strategies: a comma-separated subset of TimeSlicing and MPS
// ("" allows exclusive use only).
func parseStrategies(s string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, v := range strings.Split(s, ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if err := oneOf("sharing-strategies", v, strategyTimeSlicing, strategyMPS); err != nil {
			return nil, err
		}
		out[v] = true
	}
	return out, nil
}

// refusedTimeSlicer refuses new time-slicing setups (the manager reads the current time slice
// before it changes one) but still restores settings made earlier, so claims prepared before
// the strategy was disallowed can be unprepared.
type refusedTimeSlicer struct {
	sharing.TimeSlicer
	allowed string
}

var _ sharing.TimeSlicer = refusedTimeSlicer{}

func (r refusedTimeSlicer) TimeSlice(context.Context, string) (int, bool, error) {
	return 0, false, notAllowed(strategyTimeSlicing, r.allowed)
}

// refusedMPS refuses to start MPS control daemons but still stops those started earlier.
type refusedMPS struct {
	sharing.MPSDaemons
	allowed string
}

var _ sharing.MPSDaemons = refusedMPS{}

func (r refusedMPS) Start(context.Context, sharing.MPSDaemonSpec) error {
	return notAllowed(strategyMPS, r.allowed)
}

func notAllowed(strategy, allowed string) error {
	if allowed == "" {
		allowed = "none: exclusive use only"
	}
	return fmt.Errorf("sharing strategy %s is not allowed on this node (serve --sharing-strategies: %s)", strategy, allowed)
}

// restrictStrategies wraps the host actions of the strategies that are not allowed.
func restrictStrategies(allowed map[string]bool, flag string, ts sharing.TimeSlicer, mps sharing.MPSDaemons) (sharing.TimeSlicer, sharing.MPSDaemons) {
	if !allowed[strategyTimeSlicing] {
		ts = refusedTimeSlicer{TimeSlicer: ts, allowed: flag}
	}
	if !allowed[strategyMPS] {
		mps = refusedMPS{MPSDaemons: mps, allowed: flag}
	}
	return ts, mps
}
