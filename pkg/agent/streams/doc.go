// Package streams serves the streams the hub opens on an agent's session:
// it reads each stream's first frame and hands the stream to the handler
// of that frame's type (a tunnel, a log, the host's facts).
package streams
