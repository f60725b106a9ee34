// Package statedir is the files of session's state directory
// (session.Config.StateDir): what a durable execution keeps so that a
// supervisor started on the same directory after this one was killed or
// restarted takes it over (session.Supervisor.Restore).
//
// The directory D holds executions/, and there one directory per
// execution, named by DirKey (a hash of owner and ID, so that neither
// needs to be a safe file name; the sandbox's keeper knows the execution's
// process by the same name). An execution's directory holds:
//
//   - record.json: who owns the execution, its spec (whose JSON is its
//     fingerprint), its ring's bounds, and once it ended its result and
//     when its retention ends (Record). Written by the start before the
//     process is launched (WriteRecord, first: in place), and again,
//     replaced atomically through record.json.tmp, when the execution
//     ends and when it becomes a tombstone; read by Restore (ReadRecord).
//     A tombstone is this file alone, kept under 4 KiB for
//     session.TombstoneRetention.
//   - ring: the replay ring's memory, a shared mapping of the file
//     (NewRing), so every event is in the file the moment it is appended,
//     and a supervisor killed at any instruction leaves a ring that
//     RecoverRing rebuilds. Removed when the execution becomes a
//     tombstone (RemoveData).
//   - input: the input accepted and not yet written to the program, and
//     both offsets (InputLog), so input acknowledged to a client is never
//     lost and never written twice. Written as input is accepted and
//     written; read by Restore (ReopenInput); removed with ring.
//   - screen: a terminal's screen state at a planned restart (Screen),
//     replaced atomically through screen.tmp by session.Supervisor.Detach
//     when the ring evicted events; read by the next supervisor's
//     Restore. None after a crash.
//   - recorder.json: a recording's recorder state at a planned restart,
//     replaced atomically through recorder.json.tmp by Detach
//     (SaveRecorder); read once and removed by the next supervisor
//     (TakeRecorder). None after a crash: the recording is cut.
//
// The whole directory is removed when the execution's retention ends,
// when the oldest tombstone makes room for a newer one, when a tombstone's
// retention ends, and when a start is made again under the same owner and
// ID (Store.Create). A directory without a readable record, or in the
// wrong place, is removed by Restore: a start killed before its record
// was written never started its process.
//
// Every file is opened relative to a descriptor of its directory and
// never through a symbolic link (sandbox.OpenStateFile): a link planted
// in the state directory is refused, not followed. The package belongs to
// session: its errors speak as session's.
package statedir
