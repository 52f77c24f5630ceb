#include "sim/rank_classes.hpp"

#include <algorithm>
#include <map>

#include "spec/placement.hpp"

namespace meshplan {

namespace {

// Positions' group instances of one kind within a stage (the same in every stage: pp is the
// outermost rank dimension, so a stage's ranks are one contiguous block).
struct PositionGroups {
  std::vector<std::uint32_t> instance_of;             // by position
  std::vector<std::vector<std::int64_t>> members;     // by instance, positions ascending, each once
};

PositionGroups position_groups(const Mesh& mesh, GroupKind g, std::int64_t per_stage) {
  PositionGroups out;
  out.instance_of.assign(static_cast<std::size_t>(per_stage), 0);
  std::vector<char> seen(static_cast<std::size_t>(per_stage), 0);
  for (std::int64_t k = 0; k < per_stage; ++k) {
    if (seen[static_cast<std::size_t>(k)]) continue;
    std::vector<std::int64_t> group;
    for (std::int64_t r : group_members(mesh, mesh_group(g), k)) group.push_back(r % per_stage);
    std::sort(group.begin(), group.end());
    group.erase(std::unique(group.begin(), group.end()), group.end());
    for (std::int64_t m : group) {
      seen[static_cast<std::size_t>(m)] = 1;
      out.instance_of[static_cast<std::size_t>(m)] = static_cast<std::uint32_t>(out.members.size());
    }
    out.members.push_back(std::move(group));
  }
  return out;
}

// Numbers keys in order of first appearance, so that position 0 is always in class 0 and a class's
// first position is its representative.
template <class Key>
std::uint32_t number_of(std::map<Key, std::uint32_t>& ids, Key key) {
  return ids.emplace(std::move(key), static_cast<std::uint32_t>(ids.size())).first->second;
}

// The classes of the members of a group instance, ascending, each once.
std::vector<std::uint32_t> member_classes(const std::vector<std::int64_t>& members,
                                          const std::vector<std::uint32_t>& class_of) {
  std::vector<std::uint32_t> out;
  out.reserve(members.size());
  for (std::int64_t m : members) out.push_back(class_of[static_cast<std::size_t>(m)]);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

RankClasses rank_classes(const Mesh& mesh, const std::vector<double>& rank_speed) {
  const std::int64_t stages = std::max(1, mesh.pp);
  const std::int64_t per_stage = std::max<std::int64_t>(1, mesh.world() / stages);
  const auto n = static_cast<std::size_t>(per_stage);
  std::array<PositionGroups, kGroupKinds> groups;
  for (int g = 0; g < kGroupKinds; ++g)
    groups[static_cast<std::size_t>(g)] = position_groups(mesh, static_cast<GroupKind>(g), per_stage);

  // First by speeds, stage by stage (the pipeline links a position to itself in the next stage).
  std::vector<std::uint32_t> class_of(n, 0);
  std::size_t n_classes = 1;
  if (!rank_speed.empty()) {
    std::map<std::vector<double>, std::uint32_t> ids;
    for (std::size_t k = 0; k < n; ++k) {
      std::vector<double> speeds(static_cast<std::size_t>(stages), 1.0);
      for (std::int64_t s = 0; s < stages; ++s) {
        const auto r = static_cast<std::size_t>(s * per_stage) + k;
        if (r < rank_speed.size()) speeds[static_cast<std::size_t>(s)] = rank_speed[r];
      }
      class_of[k] = number_of(ids, std::move(speeds));
    }
    n_classes = ids.size();
  }
  // Then split until every class's members see the same classes in each of their groups. Splitting
  // only ever adds classes, so a pass that adds none has reached the coarsest stable partition.
  while (n_classes > 1) {
    std::array<std::vector<std::uint32_t>, kGroupKinds> instance_key;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      std::map<std::vector<std::uint32_t>, std::uint32_t> ids;
      for (const auto& members : groups[g].members)
        instance_key[g].push_back(number_of(ids, member_classes(members, class_of)));
    }
    std::map<std::array<std::uint32_t, kGroupKinds + 1>, std::uint32_t> ids;
    std::vector<std::uint32_t> next(n);
    for (std::size_t k = 0; k < n; ++k) {
      std::array<std::uint32_t, kGroupKinds + 1> key{};
      key[0] = class_of[k];
      for (std::size_t g = 0; g < groups.size(); ++g) key[g + 1] = instance_key[g][groups[g].instance_of[k]];
      next[k] = number_of(ids, key);
    }
    const bool stable = ids.size() == n_classes;
    class_of = std::move(next);
    n_classes = ids.size();
    if (stable) break;
  }

  RankClasses out;
  out.ranks_per_stage = per_stage;
  out.representative.assign(n_classes, -1);
  for (std::size_t k = 0; k < n; ++k)
    if (out.representative[class_of[k]] < 0) out.representative[class_of[k]] = static_cast<std::int64_t>(k);
  // A class's group holds the same classes whichever of its positions is asked (the partition is
  // stable), so its representative's group stands for all.
  for (std::size_t g = 0; g < groups.size(); ++g) {
    ClassGroups& cg = out.groups[g];
    std::map<std::vector<std::uint32_t>, std::uint32_t> ids;
    for (std::int64_t rep : out.representative) {
      std::vector<std::uint32_t> members =
          member_classes(groups[g].members[groups[g].instance_of[static_cast<std::size_t>(rep)]], class_of);
      const std::uint32_t id = number_of(ids, members);
      if (id == cg.members.size()) cg.members.push_back(std::move(members));
      cg.instance_of.push_back(id);
    }
  }
  out.class_of = std::move(class_of);
  return out;
}

}  // namespace meshplan
