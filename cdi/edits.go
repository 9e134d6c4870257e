package cdi

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"tags.cncf.io/container-device-interface/specs-go"
)

// mergeEdits adds deep copies of src's entries to dst. An environment variable, device node path,
// mount container path or network interface that dst already has is skipped when identical and
// an error when different; hooks that are identical to one already present are skipped.
func mergeEdits(dst, src *specs.ContainerEdits) error {
	if src == nil {
		return nil
	}
	for _, merge := range []func(dst, src *specs.ContainerEdits) error{
		mergeEnv, mergeDeviceNodes, mergeMounts, mergeHooks, mergeNetDevices, mergeIntelRdt, mergeGIDs,
	} {
		if err := merge(dst, src); err != nil {
			return err
		}
	}
	return nil
}

func mergeEnv(dst, src *specs.ContainerEdits) error {
	for _, e := range src.Env {
		key, _, ok := strings.Cut(e, "=")
		if !ok || key == "" {
			return fmt.Errorf("env %q: must be KEY=VALUE", e)
		}
		i := slices.IndexFunc(dst.Env, func(d string) bool { return strings.HasPrefix(d, key+"=") })
		switch {
		case i < 0:
			dst.Env = append(dst.Env, e)
		case dst.Env[i] != e:
			return fmt.Errorf("env %s: set to both %q and %q", key, dst.Env[i], e)
		}
	}
	return nil
}

func mergeDeviceNodes(dst, src *specs.ContainerEdits) error {
	for _, n := range src.DeviceNodes {
		if n == nil {
			continue
		}
		i := slices.IndexFunc(dst.DeviceNodes, func(d *specs.DeviceNode) bool { return d.Path == n.Path })
		switch {
		case i < 0:
			dst.DeviceNodes = append(dst.DeviceNodes, cloneNode(n))
		case !reflect.DeepEqual(dst.DeviceNodes[i], n):
			return fmt.Errorf("device node %s: given twice with different content", n.Path)
		}
	}
	return nil
}

func mergeMounts(dst, src *specs.ContainerEdits) error {
	for _, m := range src.Mounts {
		if m == nil {
			continue
		}
		i := slices.IndexFunc(dst.Mounts, func(d *specs.Mount) bool { return d.ContainerPath == m.ContainerPath })
		switch {
		case i < 0:
			c := *m
			c.Options = slices.Clone(m.Options)
			dst.Mounts = append(dst.Mounts, &c)
		case !reflect.DeepEqual(dst.Mounts[i], m):
			return fmt.Errorf("mount at %s: given twice, from %s and from %s", m.ContainerPath, dst.Mounts[i].HostPath, m.HostPath)
		}
	}
	return nil
}

// mergeHooks adds the hooks dst does not have yet; hooks never conflict.
func mergeHooks(dst, src *specs.ContainerEdits) error {
	for _, h := range src.Hooks {
		if h == nil || slices.ContainsFunc(dst.Hooks, func(d *specs.Hook) bool { return reflect.DeepEqual(d, h) }) {
			continue
		}
		c := *h
		c.Args, c.Env = slices.Clone(h.Args), slices.Clone(h.Env)
		if h.Timeout != nil {
			t := *h.Timeout
			c.Timeout = &t
		}
		dst.Hooks = append(dst.Hooks, &c)
	}
	return nil
}

func mergeNetDevices(dst, src *specs.ContainerEdits) error {
	for _, n := range src.NetDevices {
		if n == nil {
			continue
		}
		i := slices.IndexFunc(dst.NetDevices, func(d *specs.LinuxNetDevice) bool { return d.HostInterfaceName == n.HostInterfaceName })
		switch {
		case i < 0:
			c := *n
			dst.NetDevices = append(dst.NetDevices, &c)
		case *dst.NetDevices[i] != *n:
			return fmt.Errorf("network device %s: given twice with different names", n.HostInterfaceName)
		}
	}
	return nil
}

func mergeIntelRdt(dst, src *specs.ContainerEdits) error {
	r := src.IntelRdt
	if r == nil {
		return nil
	}
	if dst.IntelRdt != nil && !reflect.DeepEqual(dst.IntelRdt, r) {
		return fmt.Errorf("intelRdt: given twice with different content")
	}
	c := *r
	c.Schemata = slices.Clone(r.Schemata)
	dst.IntelRdt = &c
	return nil
}

// mergeGIDs adds the additional group IDs dst does not have yet.
func mergeGIDs(dst, src *specs.ContainerEdits) error {
	for _, g := range src.AdditionalGIDs {
		if !slices.Contains(dst.AdditionalGIDs, g) {
			dst.AdditionalGIDs = append(dst.AdditionalGIDs, g)
		}
	}
	return nil
}

func cloneNode(n *specs.DeviceNode) *specs.DeviceNode {
	c := *n
	if n.FileMode != nil {
		m := *n.FileMode
		c.FileMode = &m
	}
	if n.UID != nil {
		u := *n.UID
		c.UID = &u
	}
	if n.GID != nil {
		g := *n.GID
		c.GID = &g
	}
	return &c
}
