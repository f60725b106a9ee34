package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// kubeOptions are termgate manifest kubernetes's own flags; serve's flags
// follow them.
type kubeOptions struct {
	name, namespace, image   string
	clusterDomain            string
	stateSize, workspaceSize string
	replicas                 int
	privileged               bool      // the container is privileged: true
	apparmor                 bool      // name the termgate AppArmor profile
	userNamespace            bool      // hostUsers: false
	env                      []kubeEnv // the ConfigMap: serve's flags as TERMGATE_*
}

// kubeEnv is one ConfigMap entry.
type kubeEnv struct{ key, value string }

// kubeFlags adds manifest kubernetes's own flags to fs, bound to o.
func kubeFlags(fs *flag.FlagSet, o *kubeOptions) *flag.FlagSet {
	fs.StringVar(&o.name, "name", "termgate", "kubernetes: the StatefulSet's name, and the prefix of the Services, ConfigMap and Secrets")
	fs.StringVar(&o.namespace, "namespace", "default", "kubernetes: the namespace")
	fs.IntVar(&o.replicas, "replicas", 3, fmt.Sprintf("kubernetes: nodes (1 to %d)", maxKubeReplicas))
	fs.StringVar(&o.image, "image", "", "kubernetes: the container image holding termgate and bwrap (required)")
	fs.StringVar(&o.clusterDomain, "cluster-domain", "cluster.local", "kubernetes: the cluster's DNS domain")
	fs.StringVar(&o.stateSize, "state-size", "1Gi", "kubernetes: memory for each pod's state directory (an emptyDir on tmpfs)")
	fs.StringVar(&o.workspaceSize, "workspace-size", "20Gi", "kubernetes: each pod's workspace volume (a PersistentVolumeClaim)")
	fs.BoolVar(&o.privileged, "privileged", false, "kubernetes: run the container privileged: true, as before the capability list, seccomp and AppArmor profiles existed (workspace quotas need it: loop devices)")
	fs.BoolVar(&o.apparmor, "apparmor", true, "kubernetes: name the AppArmor profile termgate manifest apparmor prints (appArmorProfile Localhost termgate); the kubelet refuses a pod that names one on a node without AppArmor: --apparmor=false there")
	fs.BoolVar(&o.userNamespace, "user-namespace", false, "kubernetes: run the pod in a user namespace of its own (hostUsers: false); needs nodes with user namespace support in the kubelet and runtime; the sandbox and tenant ids default to ids within the pod's 65536 (--sandbox-uid 60000, --tenant-uids 10000:50000)")
	return fs
}

// maxKubeReplicas bounds --replicas: the list fan-out asks every node.
const maxKubeReplicas = 64

// kubePort is the port serve listens on in the pod.
const kubePort = 8080

// defaultKubeMaxConnsPerAddr is --max-conns-per-addr in the pods unless
// given: behind a Service or an ingress every client shares a few
// addresses, and nodes reach each other with many connections (R3).
const defaultKubeMaxConnsPerAddr = 4096

// kubeManaged are the serve flags the manifest sets itself: given again
// they would contradict the volumes, ports and peers it declares.
var kubeManaged = []string{
	"listen", "jwt-secret-file", "node-secret-file", "state-dir", "workspace-root", "node", "peer", "peer-dns",
	"peer-port", "peer-scheme", "sigterm", "dev", "config", "print-config", "tls-cert", "tls-key",
}

var (
	kubeNameSyntax   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z]([a-z0-9-]{0,50}[a-z0-9])?$`) }) // a DNS-1035 label; room for -NN and the revision hash
	kubeNSSyntax     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`) })
	kubeDomainSyntax = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)
	})
	kubeSizeSyntax  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[1-9][0-9]{0,8}(Ki|Mi|Gi|Ti)$`) })
	kubeImageSyntax = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$`) })
)

// runManifestKubernetes prints the manifests of a termgate cluster on
// Kubernetes: termgate manifest kubernetes --image IMAGE [flags] [serve flags].
func runManifestKubernetes(args []string, stdout io.Writer) error {
	var o kubeOptions
	fs := kubeFlags(newFlagSet("manifest kubernetes"), &o)
	own, serveArgs := splitOwnFlags(fs, args)
	if err := parseFlags(fs, own); err != nil {
		return withServeHelp(err, fs)
	}
	if err := o.check(); err != nil {
		return usageError{fmt.Errorf("manifest kubernetes: %w", err)}
	}
	env, err := kubeServeEnv(&o, serveArgs)
	if err != nil {
		return withServeHelp(err, kubeFlags(newFlagSet("manifest kubernetes"), new(kubeOptions)))
	}
	o.env = env
	_, err = io.WriteString(stdout, o.render())
	return err
}

// splitOwnFlags splits args into the leading flags fs defines, with
// their values, and the rest; a "--" ends the leading flags.
func splitOwnFlags(fs *flag.FlagSet, args []string) (own, rest []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return args[:i], args[i+1:]
		}
		if !strings.HasPrefix(a, "-") {
			return args[:i], args[i:]
		}
		name, _, inline := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		if f == nil && name != "h" && name != "help" {
			return args[:i], args[i:]
		}
		if f != nil && !inline && !isBoolFlag(f) {
			i++ // its value
		}
	}
	return args, nil
}

// isBoolFlag reports whether f takes no value (--privileged).
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// check refuses names Kubernetes or the nodes would refuse.
func (o *kubeOptions) check() error {
	switch {
	case o.image == "":
		return errors.New("--image is required: an image holding termgate, bwrap and the programs clients may start")
	case !kubeImageSyntax().MatchString(o.image):
		return fmt.Errorf("--image %q: want an image reference such as registry.example/termgate:1.4", o.image)
	case !kubeNameSyntax().MatchString(o.name):
		return fmt.Errorf("--name %q: want a DNS-1035 label of at most 52 characters (lower-case letters, digits, inner hyphens; a letter first)", o.name)
	case !kubeNSSyntax().MatchString(o.namespace):
		return fmt.Errorf("--namespace %q: want a DNS label (lower-case letters, digits, inner hyphens; at most 63)", o.namespace)
	case o.replicas < 1 || o.replicas > maxKubeReplicas:
		return fmt.Errorf("--replicas %d: want 1 to %d", o.replicas, maxKubeReplicas)
	case len(o.clusterDomain) > 200 || !kubeDomainSyntax().MatchString(o.clusterDomain):
		return fmt.Errorf("--cluster-domain %q: want a DNS name such as cluster.local", o.clusterDomain)
	case !kubeSizeSyntax().MatchString(o.stateSize):
		return fmt.Errorf("--state-size %q: want a size in Ki, Mi, Gi or Ti, such as 1Gi", o.stateSize)
	case !kubeSizeSyntax().MatchString(o.workspaceSize):
		return fmt.Errorf("--workspace-size %q: want a size in Ki, Mi, Gi or Ti, such as 20Gi", o.workspaceSize)
	case o.privileged && o.userNamespace:
		return errors.New("--privileged and --user-namespace exclude each other")
	}
	return nil
}

// headless is the headless Service's domain, the nodes' --peer-dns.
func (o *kubeOptions) headless() string {
	return o.name + "-headless." + o.namespace + ".svc." + o.clusterDomain
}

// fixedServeArgs are the container's arguments after "termgate": what
// the volumes and ports of the manifest decide.
func (o *kubeOptions) fixedServeArgs() []string {
	return []string{"serve", "--listen", "0.0.0.0:" + strconv.Itoa(kubePort),
		"--jwt-secret-file", "/etc/termgate/jwt/secret", "--node-secret-file", "/etc/termgate/node/secret",
		"--state-dir", "/run/termgate", "--workspace-root", "/var/lib/termgate/workspaces"}
}

// yamlString quotes s as a YAML double-quoted scalar (JSON's strings are
// YAML's).
func yamlString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

// render is the manifests, one YAML stream.
func (o *kubeOptions) render() string {
	var data strings.Builder
	for _, e := range o.env {
		fmt.Fprintf(&data, "  %s: %s\n", e.key, yamlString(e.value))
	}
	var args strings.Builder
	for _, a := range o.fixedServeArgs() {
		fmt.Fprintf(&args, "            - %s\n", yamlString(a))
	}
	r := strings.NewReplacer(
		"{{NAME}}", o.name, "{{NS}}", o.namespace, "{{IMAGE}}", yamlString(o.image),
		"{{REPLICAS}}", strconv.Itoa(o.replicas), "{{PORT}}", strconv.Itoa(kubePort),
		"{{STATE_SIZE}}", o.stateSize, "{{WORKSPACE_SIZE}}", o.workspaceSize,
		"{{HEADLESS}}", o.headless(), "{{DATA}}", data.String(), "{{ARGS}}", args.String(),
		"{{CONTEXT_SUMMARY}}", o.contextSummary(), "{{COMMAND}}", o.command(),
		"{{SECURITY}}", o.securityContext(), "{{HOST_USERS}}", o.hostUsers(),
	)
	return r.Replace(kubeTemplate)
}

const kubeTemplate = `# termgate on Kubernetes: printed by termgate manifest kubernetes.
# {{NAME}}-0 ... are the nodes of one cluster: any node serves any request,
# proxying to the node an execution's ID names. Apply:
#
#   kubectl -n {{NS}} create secret generic {{NAME}}-jwt --from-file=secret=jwt-secret
#   kubectl -n {{NS}} create secret generic {{NAME}}-node --from-file=secret=node-secret
#   kubectl -n {{NS}} apply -f termgate.yaml
#
# Each secret file holds at least 32 random bytes (head -c 32 /dev/urandom |
# base64 > node-secret); the Secrets are referenced here, never held. The
# node secret signs the hops between pods: keep it from clients.
#
# What a rolling restart keeps, honestly: a pod replaced (a new image, a
# drained node) ends every execution in it, its keeper included, because a
# pod's processes end with it. SIGTERM is therefore a shutdown here
# (TERMGATE_SIGTERM=shutdown): clients get the executions' real exits,
# and their IDs answer "gone" afterwards, never "not found". Executions on
# the other pods are untouched. The state directory (tmpfs) survives a
# container restart inside the pod, but serve is the pod's PID 1, so a
# crash of serve ends the keeper too.
#
# Workspaces are per pod ({{NAME}}-0's files are not on {{NAME}}-1), and the
# limits (rates, connections per subject, --max-running-per-tenant) are
# counted by each pod.
#
# {{CONTEXT_SUMMARY}}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{NAME}}
  namespace: {{NS}}
  labels:
    app.kubernetes.io/name: {{NAME}}
data:
{{DATA}}---
# The nodes' membership: each pod finds the others in the SRV records
#   _http._tcp.{{HEADLESS}}
# and reaches each at POD.{{HEADLESS}}. Not-ready pods stay
# listed, so a pod that is restarting or at capacity keeps its place in
# the keyed-start ranking.
apiVersion: v1
kind: Service
metadata:
  name: {{NAME}}-headless
  namespace: {{NS}}
  labels:
    app.kubernetes.io/name: {{NAME}}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector:
    app.kubernetes.io/name: {{NAME}}
  ports:
    - name: http # the SRV records' name: keep it
      port: {{PORT}}
      targetPort: http
---
# What clients (or an ingress) connect to: any ready pod.
apiVersion: v1
kind: Service
metadata:
  name: {{NAME}}
  namespace: {{NS}}
  labels:
    app.kubernetes.io/name: {{NAME}}
spec:
  type: ClusterIP
  selector:
    app.kubernetes.io/name: {{NAME}}
  ports:
    - name: http
      port: 80
      targetPort: http
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{NAME}}
  namespace: {{NS}}
  labels:
    app.kubernetes.io/name: {{NAME}}
spec:
  serviceName: {{NAME}}-headless
  replicas: {{REPLICAS}}
  # The pods do not depend on each other to start.
  podManagementPolicy: Parallel
  updateStrategy:
    type: RollingUpdate
  selector:
    matchLabels:
      app.kubernetes.io/name: {{NAME}}
  template:
    metadata:
      labels:
        app.kubernetes.io/name: {{NAME}}
    spec:
      # serve needs no access to the Kubernetes API.
      automountServiceAccountToken: false
{{HOST_USERS}}      # A shutdown stops every execution gracefully and sends each client
      # its exit.
      terminationGracePeriodSeconds: 60
      containers:
        - name: termgate
          image: {{IMAGE}}
{{COMMAND}}          args:
{{ARGS}}          env:
            # The node's name is the pod's: {{NAME}}-0, {{NAME}}-1, ...
            - name: TERMGATE_NODE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
          envFrom:
            - configMapRef:
                name: {{NAME}}
          ports:
            - name: http
              containerPort: {{PORT}}
          # Ready: serving and below --max-running; the client Service
          # sends new connections elsewhere meanwhile.
          readinessProbe:
            httpGet:
              path: /readyz
              port: http
            periodSeconds: 5
          livenessProbe:
            httpGet:
              path: /healthz
              port: http
            periodSeconds: 10
            failureThreshold: 6
{{SECURITY}}          volumeMounts:
            - name: state
              mountPath: /run/termgate
            - name: workspaces
              mountPath: /var/lib/termgate/workspaces
            - name: jwt
              mountPath: /etc/termgate/jwt
              readOnly: true
            - name: node
              mountPath: /etc/termgate/node
              readOnly: true
      volumes:
        # The executions' state: memory that must not be written to a
        # disk. It lives as long as the pod. Kubernetes makes it 0777; serve
        # makes it 0700 while it is still empty, and refuses it otherwise.
        - name: state
          emptyDir:
            medium: Memory
            sizeLimit: {{STATE_SIZE}}
        # Mode 0400: serve refuses a secret others may read.
        - name: jwt
          secret:
            secretName: {{NAME}}-jwt
            defaultMode: 0400
        - name: node
          secret:
            secretName: {{NAME}}-node
            defaultMode: 0400
  volumeClaimTemplates:
    - metadata:
        name: workspaces
      spec:
        accessModes: ["ReadWriteOnce"]
        resources:
          requests:
            storage: {{WORKSPACE_SIZE}}
---
# One pod down at a time, by the cluster's own doing (drains, upgrades).
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{NAME}}
  namespace: {{NS}}
  labels:
    app.kubernetes.io/name: {{NAME}}
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      app.kubernetes.io/name: {{NAME}}
`
