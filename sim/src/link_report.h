// MEMSIM_LOG_LINK=1: at process exit, one line per device on stderr with the bytes its H2D and
// D2H engines carried (booked while throttled), so a run's link traffic can be compared with a
// model's (bench/replay/calibrate.sh).
//
// Thread safety: call once, from Driver::Init (under its lock).
#ifndef MEMSIM_SRC_LINK_REPORT_H_
#define MEMSIM_SRC_LINK_REPORT_H_

namespace memsim {

// Registers the exit report when MEMSIM_LOG_LINK is "1".
void ReportLinkAtExitIfAsked();

}  // namespace memsim

#endif  // MEMSIM_SRC_LINK_REPORT_H_
