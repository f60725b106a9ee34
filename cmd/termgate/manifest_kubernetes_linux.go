package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// recordedValue is a serve flag's value that keeps every text given to it,
// so the manifest can write the flags as environment variables.
type recordedValue struct {
	flag.Value
	name string
	got  *[]kubeEnv
}

func (v recordedValue) Set(s string) error {
	if err := v.Value.Set(s); err != nil {
		return err
	}
	*v.got = append(*v.got, kubeEnv{v.name, s})
	return nil
}

func (v recordedValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// repeatable reports whether f is one of serve's lists (envFlags.list),
// whose environment variable holds every value, comma-separated.
func repeatable(f *flag.Flag) bool { return strings.Contains(f.Usage, "(repeatable; env ") }

// clusterEnv is the ConfigMap's part that makes the pods one cluster.
func (o *kubeOptions) clusterEnv() []kubeEnv {
	return []kubeEnv{
		{envName("peer-dns"), o.headless()},
		{envName("peer-port"), strconv.Itoa(kubePort)},
		{envName("sigterm"), sigtermShutdown},
	}
}

// kubeServeEnv turns serve's flags, given after manifest kubernetes's own,
// into the ConfigMap's TERMGATE_* entries, after checking them, with what
// the manifest sets, as serve would. A flag the manifest decides itself
// (the listen address, the secrets, the peers) is refused.
func kubeServeEnv(o *kubeOptions, serveArgs []string) ([]kubeEnv, error) {
	fs := serveFlagSet()
	var given []kubeEnv
	fs.VisitAll(func(f *flag.Flag) { f.Value = recordedValue{f.Value, f.Name, &given} })
	if err := parseFlags(fs, serveArgs); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usageError{fmt.Errorf("manifest kubernetes: unexpected argument %q: serve's flags follow the manifest's", fs.Arg(0))}
	}
	byName := map[string][]string{}
	var order []string
	for _, g := range given {
		if slices.Contains(kubeManaged, g.key) {
			return nil, usageError{fmt.Errorf("manifest kubernetes: --%s is the manifest's to set (its volumes, port and peers)", g.key)}
		}
		if _, seen := byName[g.key]; !seen {
			order = append(order, g.key)
		}
		byName[g.key] = append(byName[g.key], g.value)
	}
	env := o.clusterEnv()
	if _, ok := byName["max-conns-per-addr"]; !ok {
		env = append(env, kubeEnv{envName("max-conns-per-addr"), strconv.Itoa(defaultKubeMaxConnsPerAddr)})
	}
	quota, asked := byName["workspace-quota"]
	switch {
	case o.privileged:
	case !asked:
		// Quotas are ext4 images on loop devices, which only a
		// privileged container sees; serve refuses a quota it cannot
		// apply.
		env = append(env, kubeEnv{envName("workspace-quota"), "0"})
		serveArgs = append(slices.Clip(serveArgs), "--workspace-quota", "0")
	case quota[len(quota)-1] != "0":
		return nil, usageError{errors.New("manifest kubernetes: --workspace-quota needs loop devices, which only --privileged gives the container")}
	}
	if o.userNamespace {
		// The pod's user namespace maps 65536 ids: the sandbox and tenant
		// ids must lie within it, clear of root and of nobody (65534).
		for _, d := range [][2]string{{"sandbox-uid", "60000"}, {"sandbox-gid", "60000"}, {"tenant-uids", "10000:50000"}} {
			if _, ok := byName[d[0]]; !ok {
				env = append(env, kubeEnv{envName(d[0]), d[1]})
				serveArgs = append(slices.Clip(serveArgs), "--"+d[0], d[1])
			}
		}
	}
	for _, name := range order {
		values := byName[name]
		value := values[len(values)-1] // as the flag package: the last wins
		if repeatable(fs.Lookup(name)) {
			for _, v := range values {
				if strings.Contains(v, ",") {
					return nil, usageError{fmt.Errorf("manifest kubernetes: --%s %q: a value holding a comma cannot go into %s", name, v, envName(name))}
				}
			}
			value = strings.Join(values, ",")
		}
		env = append(env, kubeEnv{envName(name), value})
	}
	check := append(o.fixedServeArgs()[1:], "--node", o.name+"-0", "--peer-dns", o.headless(),
		"--peer-port", strconv.Itoa(kubePort), "--sigterm", sigtermShutdown)
	if _, err := checkServeArgs(append(check, serveArgs...)); err != nil {
		return nil, err
	}
	return env, nil
}
