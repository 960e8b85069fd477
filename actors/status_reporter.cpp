#include "actors/status_reporter.hpp"

#include <mutex>
#include <string_view>
#include <variant>

#include <caf/all.hpp>

#include "messages/local.hpp"
#include "messages/wire.hpp"

namespace swarm::status_reporter_local {
struct report_due {};  ///< its own timer, every 2 s
}  // namespace swarm::status_reporter_local

SWARM_LOCAL_MESSAGE(swarm::status_reporter_local::report_due)

namespace swarm {

struct trainer_tally {
  std::mutex m;
  proto::trainer_report report;
};

std::shared_ptr<trainer_tally> tally_of(metrics_sink& metrics) {
  auto tally = std::make_shared<trainer_tally>();
  metrics.observe([tally](double, const char* event, std::initializer_list<metrics_sink::field> fields) {
    const std::string_view e{event};
    if (e != "step" && e != "reroute" && e != "ban" && e != "eval" && e != "verify")
      return;
    std::lock_guard<std::mutex> lock(tally->m);
    auto& r = tally->report;
    if (e == "reroute") {
      r.set_reroutes(r.reroutes() + 1);
      return;
    }
    if (e == "ban") {
      r.set_bans(r.bans() + 1);
      return;
    }
    if (e == "verify") {
      for (const auto& [key, value] : fields) {
        const std::string_view k{key};
        const auto* i = std::get_if<int64_t>(&value);
        if (!i)
          continue;
        if (k == "requests")
          r.set_verify_requests(*i);
        else if (k == "samples")
          r.set_verify_samples(*i);
        else if (k == "forward_samples")
          r.set_forward_samples(*i);
        else if (k == "disagreed")
          r.set_verify_disagreed(*i);
        else if (k == "strikes")
          r.set_verify_strikes(*i);
        else if (k == "bans")
          r.set_verify_bans(*i);
      }
      return;
    }
    if (e == "eval") {
      for (const auto& [key, value] : fields) {
        const std::string_view k{key};
        if (const auto* i = std::get_if<int64_t>(&value); i && k == "step")
          r.set_eval_step(*i);
        else if (const auto* d = std::get_if<double>(&value); d && k == "loss")
          r.set_eval_loss(*d);
      }
      r.set_has_eval(true);
      return;
    }
    for (const auto& [key, value] : fields) {
      const std::string_view k{key};
      const auto* i = std::get_if<int64_t>(&value);
      const auto* d = std::get_if<double>(&value);
      if (k == "step" && i)
        r.set_step(*i);
      else if (k == "loss" && d)
        r.set_loss(*d);
      else if (k == "tokens_per_s" && d)
        r.set_tokens_per_s(*d);
      else if (k == "samples" && i)
        r.set_samples(*i);
      else if (k == "tokens" && i)
        r.set_tokens(*i);
      else if (k == "dropped" && i)
        r.set_dropped(*i);
      else if (k == "retries" && i)
        r.set_retries(*i);
      else if (k == "busy" && i)
        r.set_busy(*i);
      else if (k == "wire_bytes" && i)
        r.set_wire_bytes(*i);
      else if (k == "elapsed_s" && d)
        r.set_elapsed_s(*d);
    }
  });
  return tally;
}

caf::behavior status_reporter(caf::event_based_actor* self, std::string trainer_id, int64_t max_steps,
                              std::shared_ptr<trainer_tally> tally, coordinator_actor coord) {
  auto current = std::make_shared<coordinator_actor>(std::move(coord));
  auto report = [=] {
    proto::trainer_report r;
    {
      std::lock_guard<std::mutex> lock(tally->m);
      r = tally->report;
    }
    r.set_trainer_id(trainer_id);
    r.set_max_steps(max_steps);
    return wrap(r);
  };
  self->send(self, status_reporter_local::report_due{});
  return {
      [=](status_reporter_local::report_due) {
        self->send(*current, report_atom::value, report());
        self->delayed_send(self, std::chrono::seconds(2), status_reporter_local::report_due{});
      },
      // The last report, answered once the coordinator took it (or could not):
      // without it the status page kept a finished trainer at a step up to 2 s old.
      [=](report_atom) {
        auto rp = self->make_response_promise();
        self->request(*current, std::chrono::seconds(2), report_atom::value, report())
            .then([rp]() mutable { rp.deliver(caf::unit); }, [rp](caf::error&) mutable { rp.deliver(caf::unit); });
        return rp;
      },
      [=](coordinator_changed& c) { *current = c.coordinator; },
  };
}

void report_last(caf::actor_system& sys, const caf::actor& reporter) {
  caf::scoped_actor self{sys};
  self->request(reporter, std::chrono::seconds(3), report_atom::value).receive([] {}, [](caf::error&) {});
}

}  // namespace swarm
