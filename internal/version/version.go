package version

// Version is the fleet release, or "dev" for an unstamped build.
var Version = "dev"
