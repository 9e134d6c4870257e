package gputest

import "github.com/gpudra/gpudra/mig"

// lookupModel is the one place the fakes take MIG geometry from: the mig package's catalog.
func lookupModel(productName string) (*mig.Model, error) { return mig.Lookup(productName) }
