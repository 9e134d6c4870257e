package main

import (
	"strings"

	"github.com/gpudra/gpudra/gpu/gputest"
)

// migConfigOption is temporary until gputest.WithMIGConfig lands.
func migConfigOption(name string) gputest.Option {
	if name == "all-balanced" {
		return gputest.WithMIGAll("1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb")
	}
	return gputest.WithMIGAll(strings.TrimPrefix(name, "all-"))
}
