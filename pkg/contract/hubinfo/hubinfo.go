package hubinfo

// ConfigMap is the hub-info ConfigMap's name.
const ConfigMap = "fleet-hub-info"

// Keys of ConfigMap.
const (
	KeyCAPin   = "caPin"
	KeyURL     = "url"
	KeyVersion = "version"
)
