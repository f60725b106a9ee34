package main

// The container's security context, by variant: the default asks for
// capabilities and the termgate seccomp and AppArmor profiles instead of
// privileged: true; --user-namespace adds a user namespace of the pod's
// own; --privileged keeps the privileged container.

// contextSummary is the header's line on the security context.
func (o *kubeOptions) contextSummary() string {
	if o.privileged {
		return "The container is privileged (--privileged): see the comments at securityContext."
	}
	return `The container is not privileged: it needs eleven capabilities and the
# termgate seccomp` + map[bool]string{true: " and AppArmor profiles", false: " profile"}[o.apparmor] + ` on every node: see the comments at
# securityContext. Workspace quotas need --privileged (loop devices).`
}

// hostUsers is the pod's hostUsers line, with --user-namespace.
func (o *kubeOptions) hostUsers() string {
	if !o.userNamespace {
		return ""
	}
	return `      # A user namespace of the pod's own: its root, and the capabilities
      # below, are not the node's.
      hostUsers: false
`
}

// command is the container's command: without privileged: true, a shell
// that gives serve what the runtime leaves read-only before it starts.
func (o *kubeOptions) command() string {
	if o.privileged {
		return ""
	}
	return kubeSetupCommand
}

// kubeSetupCommand readies the container for serve, then runs it with
// the args. It needs /bin/sh, mount and awk in the image.
const kubeSetupCommand = `          # Before serve starts, the container makes writable what the runtime
          # mounts read-only and serve must write (allowed by
          # CAP_SYS_ADMIN, the seccomp and the AppArmor profiles):
          # - /sys/fs/cgroup read-write: each execution's memory, pids and
          #   CPU ceilings (on by default) are cgroups serve creates under
          #   the container's own, all bounded by the pod's resources;
          # - on cgroup v2, serve moves to a child group (init), since a
          #   group holding processes cannot hand controllers down.
          # Where the cgroups stay read-only, serve counts them as absent and
          # refuses its ceilings, naming the flag that turns each off;
          # TERMGATE_PIDS_FALLBACK=rlimit then keeps a per-execution process
          # ceiling (RLIMIT_NPROC), which /readyz reports as degraded.
          command:
            - /bin/sh
            - -c
            - |
              for m in $(awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/self/mounts); do
                mount -o remount,rw,bind "$m" || echo "termgate: $m stays read-only" >&2
              done
              if [ -w /sys/fs/cgroup/cgroup.subtree_control ]; then
                mkdir -p /sys/fs/cgroup/init && echo $$ > /sys/fs/cgroup/init/cgroup.procs ||
                  echo "termgate: serve stays in the container's cgroup" >&2
              fi
              exec termgate "$@"
            - termgate
`

// securityContext is the container's securityContext block.
func (o *kubeOptions) securityContext() string {
	if o.privileged {
		return kubePrivilegedContext
	}
	ctx := kubeCapabilitiesContext
	if o.apparmor {
		ctx += `            # Load termgate manifest apparmor's profile on every node that runs
            # AppArmor; the runtime's default denies mount. The kubelet refuses
            # this pod on a node without AppArmor: --apparmor=false there.
            appArmorProfile:
              type: Localhost
              localhostProfile: termgate
`
	}
	return ctx
}

// kubeCapabilitiesContext is the security context without privileged:
// true, each capability with the reason serve needs it.
const kubeCapabilitiesContext = `          securityContext:
            # serve runs as root and drops to each tenant's uid itself; the
            # sandboxes get no capability (bwrap drops them all).
            runAsUser: 0
            # no_new_privs for serve and the keeper: bwrap runs unprivileged
            # (a user namespace per sandbox), never setuid, and the sandboxes
            # set it themselves.
            allowPrivilegeEscalation: false
            capabilities:
              drop: [ALL]
              add:
                # Enter a sandbox's network namespace to open its sockets,
                # make network and mount namespaces ahead of bwrap, mount
                # /proc and the cgroups read-write at start.
                - SYS_ADMIN
                # Open /proc/PID/ns/* of sandbox processes owned by other
                # uids.
                - SYS_PTRACE
                # Network policies: bring lo up and write routes and nftables
                # rules in a sandbox's network namespace, and bind the DNS
                # stub on port 53 in it.
                - NET_ADMIN
                - NET_BIND_SERVICE
                # Give each tenant's workspace to the tenant's uid.
                - CHOWN
                # Open and write files of tenants' uids: workspaces, state.
                - DAC_OVERRIDE
                # Change modes and times of files other uids own.
                - FOWNER
                # Run bwrap as the tenant's uid and gid, without groups.
                - SETUID
                - SETGID
                # Enter and leave the lean mount namespace bwrap is forked
                # from (setns of a mount namespace needs it with SYS_ADMIN).
                - SYS_CHROOT
                # Signal sandbox processes owned by other uids.
                - KILL
            # Put termgate manifest seccomp's profile at
            # /var/lib/kubelet/seccomp/termgate.json on every node: the
            # runtime's default refuses mount, unshare and setns.
            seccompProfile:
              type: Localhost
              localhostProfile: termgate.json
`

// kubePrivilegedContext is the security context of --privileged.
const kubePrivilegedContext = `          securityContext:
            # The sandbox needs, and all of it comes with privileged: true:
            # - root in the container: bwrap creates user, pid, ipc, uts,
            #   cgroup and network namespaces and mounts (mount, pivot_root:
            #   CAP_SYS_ADMIN, which the runtime's default seccomp and
            #   AppArmor profiles refuse to unprivileged containers);
            # - a writable /sys/fs/cgroup: each execution's memory, pids and
            #   CPU limits (on by default) are cgroups serve creates;
            # - an unmasked /proc: a private procfs in each sandbox;
            # - loop devices and mounts: workspace quotas.
            # Not needed, so not asked: hostPID, hostNetwork, hostIPC, host
            # paths. Without --privileged the manifest asks for eleven
            # capabilities and the termgate seccomp and AppArmor profiles.
            privileged: true
            runAsUser: 0
`
