// Package firstboot configures fleet-agent on a box's first boot from what
// the user put beside the image: the kernel command line, a file system
// labelled FLEET (a partition or a USB stick), or a cloud-init NoCloud
// seed (labelled CIDATA). It also gives a box booted from a cloned image a
// hostname of its own, made from its machine-id, so two boxes never enroll
// under one name. It runs before the agent, from
// fleet-agent-firstboot.service, and never overwrites what is there.
package firstboot
