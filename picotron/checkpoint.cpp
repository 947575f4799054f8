// picotron/checkpoint.cpp — see checkpoint.h.
#include "picotron/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace picotron {

void save_tensors(const std::string& path, const NamedTensors& tensors) {
  torch::serialize::OutputArchive archive;
  std::string names;  // the archive cannot list its keys: store them, newline-separated
  for (const auto& [name, t] : tensors) {
    archive.write(name, t.detach().cpu());
    names += name + "\n";
  }
  archive.write("__names__", torch::tensor(std::vector<int64_t>(names.begin(), names.end())));
  try {
    archive.save_to(path);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot write parameter file " + path + ": " + e.what());
  }
}

std::map<std::string, torch::Tensor> load_tensors(const std::string& path) {
  if (!std::filesystem::exists(path)) throw std::runtime_error("parameter file " + path + ": no such file");
  torch::serialize::InputArchive archive;
  std::map<std::string, torch::Tensor> out;
  try {
    archive.load_from(path);
    torch::Tensor names_tensor;
    archive.read("__names__", names_tensor);
    std::string names;
    auto chars = names_tensor.accessor<int64_t, 1>();
    for (int64_t i = 0; i < chars.size(0); ++i) names.push_back(char(chars[i]));
    size_t start = 0;
    for (size_t end; (end = names.find('\n', start)) != std::string::npos; start = end + 1) {
      const std::string name = names.substr(start, end - start);
      torch::Tensor t;
      archive.read(name, t);
      out[name] = t;
    }
  } catch (const std::exception& e) {
    std::string msg = e.what();
    throw std::runtime_error("parameter file " + path + " is corrupt or not a picotron file: " +
                             msg.substr(0, msg.find('\n')));
  }
  return out;
}

}  // namespace picotron
