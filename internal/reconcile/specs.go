package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/internal/claimstate"
	"github.com/gpudra/gpudra/internal/durability"
)

// Adopted is what AdoptOrphans did: the UIDs of the claims it rebuilt from their CDI spec, and
// of those it could not (their specs are kept).
type Adopted struct {
	// Adopted are the UIDs of the claims rebuilt from their CDI spec.
	Adopted []string
	// NotAdopted are the UIDs of the claims that could not be rebuilt (their specs are kept).
	NotAdopted []string
}

// AdoptOrphans records, for every CDI spec of a claim the checkpoint does not hold, the entry
// adopt rebuilds from the spec (a prepared, recovered claim), so that kubelet's unprepare
// releases what the claim holds. Call it only when the checkpoint cannot be trusted to say what
// is not prepared (missing or corrupt): then what is on the node is the evidence, and nothing is
// destroyed for lack of a record.
func AdoptOrphans(ctx context.Context, store *checkpoint.Store, writer *cdi.Writer, adopt func(uid string) (checkpoint.ClaimState, error)) (Adopted, error) {
	var out Adopted
	uids, err := writer.List()
	if err != nil {
		return out, fmt.Errorf("list CDI specs: %w", err)
	}
	var errs []error
	for _, uid := range uids {
		if _, ok := store.Get(uid); ok {
			continue
		}
		st, err := adopt(uid)
		if err == nil {
			err = store.Put(st, durability.ReconcileDurability)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("adopt the claim of CDI spec %s: %w", uid, err))
			out.NotAdopted = append(out.NotAdopted, uid)
			continue
		}
		out.Adopted = append(out.Adopted, uid)
		klog.FromContext(ctx).Info("Adopted a prepared claim from its CDI spec; the checkpoint had no record of it", "claimUID", uid, "devices", len(st.Devices))
	}
	return out, errors.Join(errs...)
}

// SpecsReconciled is what ReconcileSpecs did: the number of prepared claims, the claims
// (ClaimRef) whose spec was written again and the UIDs of the orphan specs removed.
type SpecsReconciled struct {
	// Prepared is the number of prepared claims.
	Prepared int
	// Rewritten are the claims (ClaimRef) whose spec was written again.
	Rewritten []string
	// Pruned are the UIDs of the orphan specs removed.
	Pruned []string
}

// ReconcileSpecs writes again (rewrite) the spec of every prepared claim that has none, and,
// when the checkpoint is trusted, removes the specs of the claims it does not hold. A spec that
// exists is kept as it is: it was written atomically in this boot (reconciliation drops the
// claims of earlier boots first).
func ReconcileSpecs(ctx context.Context, store *checkpoint.Store, writer *cdi.Writer, trusted bool,
	rewrite func(checkpoint.ClaimState) error) (SpecsReconciled, error) {
	logger := klog.FromContext(ctx)
	var out SpecsReconciled
	have, err := writer.List()
	if err != nil {
		return out, fmt.Errorf("list CDI specs: %w", err)
	}
	var errs []error
	var keep []string
	for _, c := range store.List() {
		keep = append(keep, c.UID)
		if c.Phase != checkpoint.PrepareCompleted {
			continue
		}
		out.Prepared++
		if slices.Contains(have, c.UID) {
			continue
		}
		if err := rewrite(c); err != nil {
			errs = append(errs, fmt.Errorf("rewrite CDI spec of claim %s: %w", claimstate.Ref(c), err))
			continue
		}
		out.Rewritten = append(out.Rewritten, claimstate.Ref(c))
		logger.Info("Rewrote missing CDI spec", "claim", klog.KRef(c.Namespace, c.Name), "claimUID", c.UID)
	}
	if !trusted {
		return out, errors.Join(errs...)
	}
	pruned, err := writer.Prune(keep)
	out.Pruned = pruned
	if err != nil {
		errs = append(errs, fmt.Errorf("remove orphan CDI specs: %w", err))
	}
	for _, uid := range pruned {
		logger.Info("Removed orphan CDI spec", "claimUID", uid)
	}
	return out, errors.Join(errs...)
}
