// Bad checkpoint files: each gives a Status that names the file and what is wrong, and HDF5 prints
// nothing of its own.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "storage/hdf5/checkpoint_reader.h"
#include "storage/hdf5/checkpoint_writer.h"
#include "storage/hdf5/hdf5_attributes.h"
#include "storage/hdf5/hdf5_id.h"
#include "storage/hdf5/hdf5_library.h"
#include "tests/hdf5/checkpoint_test_util.h"

namespace sy {
namespace {

using testing::Pattern;
using testing::ScratchDir;

// Writes a valid checkpoint with a few tensors; returns its size in bytes.
uintmax_t WriteValid(const std::string& path) {
  auto writer = CheckpointWriter::Create(path);
  SY_CHECK(writer.ok()) << writer.status().ToString();
  for (int i = 0; i < 4; ++i) {
    std::vector<float> data = Pattern(4096, static_cast<float>(i));
    SY_CHECK_OK((*writer)->AddTensor("params/t" + std::to_string(i), DType::kF32, Shape{64, 64},
                                     data.data()));
  }
  SY_CHECK_OK((*writer)->SetText("config", "{}"));
  SY_CHECK_OK((*writer)->Commit());
  return std::filesystem::file_size(path);
}

void CopyTruncated(const std::string& from, const std::string& to, uintmax_t size) {
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(to, size);
}

// Everything written to stderr while `body` runs.
template <typename F>
std::string CaptureStderr(F body) {
  ScratchDir dir;
  const std::string log = dir.File("stderr.txt");
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int fd = ::open(log.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ::dup2(fd, 2);
  ::close(fd);
  body();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::ifstream in(log);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(CheckpointErrorsTest, MissingFile) {
  auto reader = CheckpointReader::Open("/nonexistent/ckpt.h5");
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(reader.status().message(),
            "checkpoint /nonexistent/ckpt.h5: file not found; check the path");
}

TEST(CheckpointErrorsTest, NotAnHdf5File) {
  ScratchDir dir;
  const std::string path = dir.File("notes.h5");
  std::ofstream(path) << "this is a text file, not a checkpoint\n";
  auto reader = CheckpointReader::Open(path);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reader.status().message(),
            "checkpoint " + path +
                ": not an HDF5 file (no HDF5 signature); is this a Switchyard checkpoint?");
  EXPECT_FALSE(CheckpointReader::Open(dir.path().string()).ok()) << "a directory";
}

TEST(CheckpointErrorsTest, TruncatedCheckpointsAreDataLoss) {
  ScratchDir dir;
  const std::string good = dir.File("good.h5");
  const uintmax_t size = WriteValid(good);
  ASSERT_GT(size, 4u * 4096 * 4);
  for (uintmax_t cut : {size - 1, size - 4096, size / 2, uintmax_t{2048}, uintmax_t{100},
                        uintmax_t{4}, uintmax_t{0}}) {
    const std::string path = dir.File("cut" + std::to_string(cut) + ".h5");
    CopyTruncated(good, path, cut);
    auto reader = CheckpointReader::Open(path);
    ASSERT_FALSE(reader.ok()) << "truncated to " << cut << " of " << size << " bytes";
    EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss) << reader.status().ToString();
    EXPECT_NE(reader.status().message().find("checkpoint " + path + ": "), std::string::npos);
    EXPECT_NE(reader.status().message().find("truncated"), std::string::npos)
        << reader.status().message();
  }
  // The original is still fine.
  EXPECT_TRUE(CheckpointReader::Open(good).ok());
}

TEST(CheckpointErrorsTest, CorruptHeaderIsDataLoss) {
  ScratchDir dir;
  const std::string path = dir.File("corrupt.h5");
  const uintmax_t size = WriteValid(path);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.write("\x89HDF\r\n\x1a\n", 8);  // keep the signature
    std::string garbage(256, '\xA5');
    f.seekp(static_cast<std::streamoff>(8));
    f.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  auto reader = CheckpointReader::Open(path);
  ASSERT_FALSE(reader.ok()) << "superblock destroyed, file of " << size << " bytes";
  EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss);
}

TEST(CheckpointErrorsTest, Hdf5ButNotACheckpoint) {
  ScratchDir dir;
  const std::string path = dir.File("foreign.h5");
  {
    Hdf5Lock lock;
    Hdf5Id file = Hdf5File(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    ASSERT_TRUE(file.valid());
  }
  auto reader = CheckpointReader::Open(path);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reader.status().message(),
            "checkpoint " + path +
                ": an HDF5 file, but not a Switchyard checkpoint (its root has no attribute "
                "format = \"switchyard-checkpoint\")");
}

// A checkpoint edited with raw HDF5 after writing, to build files the writer never makes.
void EditCheckpoint(const std::string& path, void (*edit)(hid_t file)) {
  WriteValid(path);
  Hdf5Lock lock;
  Hdf5Id file = Hdf5File(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
  SY_CHECK(file.valid());
  edit(file.get());
}

TEST(CheckpointErrorsTest, NewerFormatVersion) {
  ScratchDir dir;
  const std::string path = dir.File("future.h5");
  EditCheckpoint(path, [](hid_t file) {
    H5Adelete(file, "format_version");
    SY_CHECK_OK(WriteInt64Attribute(file, "format_version", 99));
  });
  auto reader = CheckpointReader::Open(path);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(reader.status().message().find("format version 99"), std::string::npos);
}

TEST(CheckpointErrorsTest, LinksAndInconsistentDTypesAreRejected) {
  ScratchDir dir;
  const std::string soft = dir.File("soft.h5");
  EditCheckpoint(soft, [](hid_t file) {
    SY_CHECK(H5Lcreate_soft("/params/t0", file, "alias", H5P_DEFAULT, H5P_DEFAULT) >= 0);
  });
  auto with_link = CheckpointReader::Open(soft);
  ASSERT_FALSE(with_link.ok());
  EXPECT_NE(with_link.status().message().find("soft or external link 'alias'"), std::string::npos)
      << with_link.status().message();

  const std::string lying = dir.File("lying.h5");
  EditCheckpoint(lying, [](hid_t file) {
    Hdf5Id dataset = Hdf5Dataset(H5Dopen2(file, "params/t1", H5P_DEFAULT));
    H5Adelete(dataset.get(), "dtype");
    SY_CHECK_OK(WriteStringAttribute(dataset.get(), "dtype", "bf16"));
  });
  auto inconsistent = CheckpointReader::Open(lying);
  ASSERT_FALSE(inconsistent.ok());
  EXPECT_EQ(
      inconsistent.status().message(),
      "checkpoint " + lying + ": tensor 'params/t1' says dtype bf16 but is stored as float32");
}

// An unwritten, chunked dataset costs HDF5 nothing to declare at any size: the file is small, its
// claims are not. (Found by fuzz/checkpoint: the reader allocated what a meta entry claimed.)
void AddUnwrittenDataset(hid_t file, const char* name, hid_t type, std::vector<hsize_t> dims) {
  Hdf5Id space =
      Hdf5Dataspace(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  Hdf5Id create = Hdf5PropertyList(H5Pcreate(H5P_DATASET_CREATE));
  const std::vector<hsize_t> chunk(dims.size(), 1);
  SY_CHECK(H5Pset_chunk(create.get(), static_cast<int>(chunk.size()), chunk.data()) >= 0);
  hid_t link = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(link, 1);
  Hdf5Id dataset =
      Hdf5Dataset(H5Dcreate2(file, name, type, space.get(), link, create.get(), H5P_DEFAULT));
  H5Pclose(link);
  SY_CHECK(dataset.valid());
}

TEST(CheckpointErrorsTest, MetadataClaimingMoreThanTheFileIsDataLoss) {
  ScratchDir dir;
  const std::string path = dir.File("huge_meta.h5");
  EditCheckpoint(path, [](hid_t file) {
    AddUnwrittenDataset(file, "meta/blob", H5T_STD_U8LE, {hsize_t{1} << 40});
  });
  auto reader = CheckpointReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  Result<std::vector<uint8_t>> bytes = (*reader)->ReadBytes("blob");
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bytes.status().message().find("checkpoint " + path + ": metadata 'blob' claims " +
                                          std::to_string(uint64_t{1} << 40) +
                                          " values of 1 "
                                          "bytes, more than the whole file holds"),
            std::string::npos)
      << bytes.status().message();
  // The rest still reads.
  EXPECT_EQ(*(*reader)->ReadText("config"), "{}");
}

TEST(CheckpointErrorsTest, TensorClaimingMoreThanTheFileIsDataLoss) {
  ScratchDir dir;
  // The third holds no value, but its other extents multiply past int64 before the 0 (the
  // checkpoint fuzzer's find: Shape::numel overflowed on it).
  for (const std::vector<hsize_t>& dims :
       {std::vector<hsize_t>{hsize_t{1} << 40, hsize_t{1} << 30},
        std::vector<hsize_t>{hsize_t{1} << 62, 16},
        std::vector<hsize_t>{hsize_t{1} << 62, hsize_t{1} << 40, 0}}) {
    const std::string path = dir.File("huge_tensor.h5");
    std::filesystem::remove(path);
    static std::vector<hsize_t> edit_dims;
    edit_dims = dims;
    EditCheckpoint(path, [](hid_t file) {
      AddUnwrittenDataset(file, "params/huge", H5T_IEEE_F32LE, edit_dims);
    });
    auto reader = CheckpointReader::Open(path);
    std::string extents;
    for (size_t i = 0; i < dims.size(); ++i) extents += (i ? ", " : "") + std::to_string(dims[i]);
    ASSERT_FALSE(reader.ok()) << "extents " << extents;
    EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(reader.status().message().find("tensor 'params/huge' claims extents [" + extents +
                                             "], more than the whole file holds"),
              std::string::npos)
        << reader.status().message();
  }
}

TEST(CheckpointErrorsTest, ForeignFloatDatasetsWithoutDTypeAreRead) {
  ScratchDir dir;
  const std::string path = dir.File("plain.h5");
  EditCheckpoint(path, [](hid_t file) {
    const hsize_t dims[1] = {3};
    Hdf5Id space = Hdf5Dataspace(H5Screate_simple(1, dims, nullptr));
    Hdf5Id dataset = Hdf5Dataset(H5Dcreate2(file, "plain", H5T_IEEE_F32LE, space.get(), H5P_DEFAULT,
                                            H5P_DEFAULT, H5P_DEFAULT));
    const float values[3] = {1, 2, 3};
    SY_CHECK(H5Dwrite(dataset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) >= 0);
  });
  auto reader = CheckpointReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  float back[3] = {};
  ASSERT_TRUE((*reader)->ReadTensor("plain", DType::kF32, Shape{3}, back).ok());
  EXPECT_EQ(back[2], 3.0f);
}

TEST(CheckpointErrorsTest, Hdf5PrintsNothingToStderr) {
  ScratchDir dir;
  const std::string good = dir.File("good.h5");
  const uintmax_t size = WriteValid(good);
  const std::string cut = dir.File("cut.h5");
  CopyTruncated(good, cut, size / 2);
  const std::string foreign = dir.File("foreign.h5");
  {
    Hdf5Lock lock;
    Hdf5Id file = Hdf5File(H5Fcreate(foreign.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  }
  Status truncated, not_checkpoint, missing_tensor, bad_dir;
  const std::string printed = CaptureStderr([&] {
    truncated = CheckpointReader::Open(cut).status();
    not_checkpoint = CheckpointReader::Open(foreign).status();
    auto reader = CheckpointReader::Open(good);
    float x;
    missing_tensor = (*reader)->ReadTensor("nope", DType::kF32, Shape{1}, &x);
    bad_dir = CheckpointWriter::Create("/proc/no/such/ckpt.h5").status();
  });
  EXPECT_FALSE(truncated.ok());
  EXPECT_FALSE(not_checkpoint.ok());
  EXPECT_FALSE(missing_tensor.ok());
  EXPECT_FALSE(bad_dir.ok());
  EXPECT_EQ(printed, "") << "HDF5's error stack leaked to stderr";
}

TEST(Hdf5IdTest, ClosesOnDestructionAndMoves) {
  Hdf5Lock lock;
  hid_t raw;
  {
    Hdf5Id space = Hdf5Dataspace(H5Screate(H5S_SCALAR));
    raw = space.get();
    ASSERT_GT(H5Iis_valid(raw), 0);
    Hdf5Id moved = std::move(space);
    EXPECT_FALSE(space.valid());  // NOLINT(bugprone-use-after-move): checking the moved-from
    EXPECT_EQ(moved.get(), raw);
    EXPECT_GT(H5Iis_valid(raw), 0);
  }
  EXPECT_LE(H5Iis_valid(raw), 0) << "destroyed owner closed the id";
  Hdf5Id invalid = Hdf5Dataspace(H5I_INVALID_HID);
  EXPECT_FALSE(invalid.valid());
  EXPECT_EQ(invalid.Close(), 0);
}

}  // namespace
}  // namespace sy
