package e2e

import "github.com/google/go-cmp/cmp"

func diffState(want, got FakeState) string { return cmp.Diff(want, got) }
